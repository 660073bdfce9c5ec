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

func ExampleReadObject() {
	o, _ := exactjson.ReadObject([]byte(`{"status": "paid", "items": [1, {"a": "}"}], "n": 1.50}`))
	s, _ := o.String("status")
	items, _ := o.Get("items")
	fmt.Println(s, string(items))
	_, err := exactjson.ReadObject([]byte(`[1]`))
	fmt.Println(err == exactjson.ErrNotObject)
	// Output:
	// paid [1, {"a": "}"}]
	// true
}

func ExampleObject_Get() {
	o, _ := exactjson.ReadObject([]byte(`{"n": 12345678901234567890, "n": 2}`))
	n, ok := o.Get("n")
	_, none := o.Get("m")
	fmt.Println(string(n), ok, none)
	// Output: 2 true false
}

func ExampleObject_String() {
	o, _ := exactjson.ReadObject([]byte(`{"name": "Zo\u00eb", "n": 1}`))
	name, ok := o.String("name")
	_, isString := o.String("n")
	fmt.Println(name, ok, isString)
	// Output: Zoë true false
}

func ExampleObject_Set() {
	o, _ := exactjson.ReadObject([]byte(`{"a": 1, "b": 2, "a": 3}`))
	o.Set("a", []byte(`[true]`))
	fmt.Println(string(o.Bytes()))
	// Output: {"b":2,"a":[true]}
}

func ExampleObject_SetString() {
	o, _ := exactjson.ReadObject([]byte(`{"status": "paid"}`))
	o.SetString("checked", `yes "really"`)
	fmt.Println(string(o.Bytes()))
	// Output: {"status":"paid","checked":"yes \"really\""}
}

func ExampleObject_Bytes() {
	o, _ := exactjson.ReadObject([]byte("{ }"))
	fmt.Println(string(o.Bytes()))
	// Output: {}
}

func ExampleAppendString() {
	fmt.Println(string(exactjson.AppendString([]byte("key="), "a \"b\"\n\x01 é")))
	// Output: key="a \"b\"\n\u0001 é"
}
