from recall.cli import main

main()
