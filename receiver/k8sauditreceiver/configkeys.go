package k8sauditreceiver

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"go.opentelemetry.io/collector/config/confighttp"
	"go.opentelemetry.io/collector/confmap"
)

var _ confmap.Unmarshaler = (*Config)(nil)

// Unmarshal reads the configuration and refuses keys the receiver does not have. The webhook's
// confighttp settings are squashed into Config, and confighttp's own Unmarshal must ignore the
// keys it does not know (they are Config's): decoded as usual, a misspelled `endpiont:` or a
// `grop:` in exclude_resources would be dropped without a word and the default used instead.
func (cfg *Config) Unmarshal(conf *confmap.Conf) error {
	raw := conf.ToStringMap()
	known := topLevelKeys()
	for _, k := range slices.Sorted(maps.Keys(raw)) {
		if !slices.Contains(known, k) {
			if near := nearestKey(k, known); near != "" {
				return fmt.Errorf("unknown key %q (did you mean %q?)", k, near)
			}
			return fmt.Errorf("unknown key %q", k)
		}
	}
	if err := conf.Unmarshal(cfg); err != nil {
		return err
	}
	// Keys below the top level (exclude_resources[0].grop, middlewares[0].…): the same input
	// decoded strictly into a copy of Config's shape whose server settings have no Unmarshal.
	shadow := reflect.New(strictConfigType)
	return confmap.NewFromStringMap(raw).Unmarshal(shadow.Interface())
}

// plainServerConfig has confighttp.ServerConfig's fields without its Unmarshal method, which
// ignores unknown keys; its Optional sections (tls, cors, auth, keepalive) decode strictly.
type plainServerConfig confighttp.ServerConfig

// strictConfigType is Config's exported fields with the server settings as plainServerConfig.
var strictConfigType = func() reflect.Type {
	t := reflect.TypeFor[Config]()
	var fields []reflect.StructField
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		if f.Type == reflect.TypeFor[confighttp.ServerConfig]() {
			f.Type = reflect.TypeFor[plainServerConfig]()
		}
		fields = append(fields, f)
	}
	return reflect.StructOf(fields)
}()

// topLevelKeys lists the keys Config accepts, squashed structs flattened.
func topLevelKeys() []string {
	var keys []string
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name, opts, _ := strings.Cut(f.Tag.Get("mapstructure"), ",")
			if slices.Contains(strings.Split(opts, ","), "squash") {
				walk(f.Type)
				continue
			}
			if name == "" || name == "-" {
				continue
			}
			keys = append(keys, name)
		}
	}
	walk(strictConfigType)
	return keys
}

// nearestKey is the known key within two edits of k (a typo), or "".
func nearestKey(k string, known []string) string {
	best, bestDist := "", 3
	for _, c := range known {
		if d := editDistance(k, c); d < bestDist {
			best, bestDist = c, d
		}
	}
	return best
}

// editDistance is the Damerau–Levenshtein distance (optimal string alignment) of two keys:
// "endpiont" is one transposition from "endpoint".
func editDistance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
