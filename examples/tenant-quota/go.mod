module github.com/weft-mesh/weft/examples/tenant-quota

go 1.26.0

require (
	github.com/weft-mesh/weft/bindings/go v0.0.0
	google.golang.org/grpc v1.85.0
	google.golang.org/protobuf v1.36.12
)

require (
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260817212433-ac3dfec99bb1 // indirect
)

// The binding is built from this checkout (it links the Rust library from ../../target).
replace github.com/weft-mesh/weft/bindings/go => ../../bindings/go
