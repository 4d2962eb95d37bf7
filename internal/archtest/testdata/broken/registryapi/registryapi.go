// Package registryapi imports store, which the rules allow.
package registryapi

import _ "example.com/broken/store"

// Name is a name.
const Name = "registryapi"
