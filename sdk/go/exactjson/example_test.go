package exactjson_test

import (
	"fmt"

	"weir.dev/sdk/exactjson"
)

func ExampleParse() {
	v, _ := exactjson.Parse([]byte(`{"amount": 12345678901234567890}`))
	fmt.Println(v.(map[string]any)["amount"])
	_, err := exactjson.Parse([]byte(`{} {}`))
	fmt.Println(err)
	_, err = exactjson.Parse([]byte("\"\xff\""))
	fmt.Println(err)
	// Output:
	// 12345678901234567890
	// data after the value
	// not UTF-8
}
