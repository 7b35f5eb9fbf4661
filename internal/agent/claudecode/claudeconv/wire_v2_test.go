//go:build goexperiment.jsonv2

package claudeconv

import (
	"encoding/json/jsontext"
	jsonv2 "encoding/json/v2"
)

// With GOEXPERIMENT=jsonv2, BenchmarkDecoders also runs decodeStd on the
// json/v2 API (jsontext.Value for raw values).
func init() {
	lineDecoders["json-v2"] = stdDecoder[jsontext.Value](func(b []byte, v any) error { return jsonv2.Unmarshal(b, v) })
}
