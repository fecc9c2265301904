module recall.dev/hack/node/pause

go 1.22
