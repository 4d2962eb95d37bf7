// Package wall breaks a rule: it imports registryapi.
package wall

import "example.com/broken/registryapi"

// Name is registryapi's.
var Name = registryapi.Name
