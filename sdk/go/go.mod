module weir.dev/sdk

go 1.24
