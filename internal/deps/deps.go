//go:build tools

// Package deps pins the chosen dependencies in go.mod before every package
// that uses them exists, so parallel work never races on `go get`.
// Delete an import here once real code uses it.
package deps

import (
	_ "github.com/BurntSushi/toml"
	_ "github.com/dgraph-io/badger/v4"
	_ "github.com/google/uuid"
	_ "github.com/gowebpki/jcs"
	_ "github.com/libp2p/go-libp2p"
	_ "github.com/libp2p/go-libp2p-pubsub"
	_ "golang.org/x/crypto/curve25519"
	_ "golang.org/x/text/unicode/norm"
)
