module recall.dev/hack/kind/pause

go 1.22
