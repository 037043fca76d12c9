package main

import (
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/idemgo/idem/outbox"
)

// relayTarget makes the deliverer of 'idem outbox relay --to URL', and
// what closes it (its connection), from the URL's scheme.
type relayTarget func(rawURL string) (outbox.Deliverer, func() error, error)

// relayTargets are the schemes --to takes, each registered by the file of
// its deliverer (outbox_relay_nats.go, ...).
var relayTargets = map[string]relayTarget{}

// relayTo makes the deliverer of --to: a usage or setup error (exit 2)
// for a scheme no deliverer takes, a URL its deliverer refuses, or a
// broker it cannot reach at once.
func relayTo(raw string) (outbox.Deliverer, func() error, error) {
	u, err := url.Parse(raw)
	schemes := strings.Join(slices.Sorted(func(yield func(string) bool) {
		for s := range relayTargets {
			if !yield(s + "://") {
				return
			}
		}
	}), ", ")
	if err != nil || relayTargets[u.Scheme] == nil {
		return nil, nil, usageError(fmt.Errorf("--to %q: want a URL of %s", raw, schemes))
	}
	d, closeFn, err := relayTargets[u.Scheme](raw)
	if err != nil {
		return nil, nil, usageError(fmt.Errorf("--to: %w", err))
	}
	return d, closeFn, nil
}
