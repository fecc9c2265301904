from recall.cli.main import main

main()
