package render

import (
	"reflect"

	"k8s.io/apimachinery/pkg/runtime"
)

// Covers reports whether every field desired sets has the same value in actual. Fields
// desired leaves unset (nil, absent) are not compared, so the API server's defaults and
// other writers' additions never look like drift; lists must have the same length, since
// an extra container or rule is drift. Both arguments are typed objects or parts of them
// (structs, maps, slices) or unstructured maps.
func Covers(desired, actual any) bool {
	d, err := toUnstructured(desired)
	if err != nil {
		return false
	}
	a, err := toUnstructured(actual)
	if err != nil {
		return false
	}
	return covers(d, a)
}

func toUnstructured(v any) (any, error) {
	switch x := v.(type) {
	case nil:
		return nil, nil
	case map[string]any, []any, string, bool, int64, float64:
		return x, nil
	}
	rv := reflect.ValueOf(v)
	for rv.Kind() == reflect.Pointer {
		if rv.IsNil() {
			return nil, nil
		}
		rv = rv.Elem()
	}
	switch rv.Kind() {
	case reflect.Struct:
		ptr := reflect.New(rv.Type())
		ptr.Elem().Set(rv)
		return runtime.DefaultUnstructuredConverter.ToUnstructured(ptr.Interface())
	default:
		// Maps and slices of typed values: wrap them in a struct-less round trip.
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&struct {
			V any `json:"v"`
		}{V: v})
		if err != nil {
			return nil, err
		}
		return m["v"], nil
	}
}

func covers(d, a any) bool {
	switch dv := d.(type) {
	case nil:
		return true
	case map[string]any:
		av, ok := a.(map[string]any)
		if !ok {
			return len(dv) == 0 && a == nil
		}
		for k, v := range dv {
			if !covers(v, av[k]) {
				return false
			}
		}
		return true
	case []any:
		av, ok := a.([]any)
		if !ok {
			return len(dv) == 0 && a == nil
		}
		if len(av) != len(dv) {
			return false
		}
		for i := range dv {
			if !covers(dv[i], av[i]) {
				return false
			}
		}
		return true
	default:
		return reflect.DeepEqual(d, a)
	}
}
