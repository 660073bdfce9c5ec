package jsonobject_test

import (
	"fmt"

	"weir.dev/sdk/jsonobject"
)

func ExampleRead() {
	o, _ := jsonobject.Read([]byte(`{"status": "paid", "items": [1, {"a": "}"}], "n": 1.50}`))
	s, _ := o.String("status")
	items, _ := o.Get("items")
	fmt.Println(s, string(items))
	_, err := jsonobject.Read([]byte(`[1]`))
	fmt.Println(err == jsonobject.ErrNotObject)
	_, err = jsonobject.Read([]byte(`{"a": [1,]}`))
	fmt.Println(err)
	// Output:
	// paid [1, {"a": "}"}]
	// true
	// invalid JSON at byte 9: ']'
}

func ExampleObject_Get() {
	o, _ := jsonobject.Read([]byte(`{"n": 12345678901234567890, "n": 2}`))
	n, ok := o.Get("n")
	_, none := o.Get("m")
	fmt.Println(string(n), ok, none)
	// Output: 2 true false
}

func ExampleObject_String() {
	o, _ := jsonobject.Read([]byte(`{"name": "Zo\u00eb \ud83d\ude00", "n": 1}`))
	name, ok := o.String("name")
	_, isString := o.String("n")
	fmt.Println(name, ok, isString)
	// Output: Zoë 😀 true false
}

func ExampleObject_Set() {
	o, _ := jsonobject.Read([]byte(`{"a": 1, "b": 2, "a": 3}`))
	o.Set("a", []byte(`[true]`))
	fmt.Println(string(o.Bytes()))
	// Output: {"b":2,"a":[true]}
}

func ExampleObject_SetString() {
	o, _ := jsonobject.Read([]byte(`{"status": "paid"}`))
	o.SetString("checked", `yes "really"`)
	fmt.Println(string(o.Bytes()))
	// Output: {"status":"paid","checked":"yes \"really\""}
}

func ExampleObject_Bytes() {
	o, _ := jsonobject.Read([]byte("{ }"))
	fmt.Println(string(o.Bytes()))
	// Output: {}
}

func ExampleAppendString() {
	fmt.Println(string(jsonobject.AppendString([]byte("key="), "a \"b\"\n\x01 é")))
	// Output: key="a \"b\"\n\u0001 é"
}
