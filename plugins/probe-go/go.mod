module weir.dev/plugins/probe-go

go 1.24

require weir.dev/sdk v0.0.0

replace weir.dev/sdk => ../../sdk/go
