package main

import (
	"context"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"

	"github.com/idemgo/idem/outbox"
	"github.com/idemgo/idem/rabbitoutbox"
)

// relayTarget is a deliverer of 'idem outbox relay --to URL', built from
// the URL: its description (no password) and what closes it.
type relayTarget struct {
	d     outbox.Deliverer
	desc  string
	close func() error
	// connect, if set, reaches the target now: the relay warns when it
	// cannot (each delivery tries again).
	connect func(ctx context.Context) error
}

// relayTargets builds the deliverer of --to by the URL's scheme.
var relayTargets = map[string]func(raw string) (relayTarget, error){
	"amqp":  amqpTarget,
	"amqps": amqpTarget,
}

// relayTo is the deliverer of --to raw.
func relayTo(raw string) (relayTarget, error) {
	u, err := url.Parse(raw)
	scheme := ""
	if err == nil {
		scheme = u.Scheme
	}
	build, ok := relayTargets[scheme]
	if !ok {
		return relayTarget{}, usageError(fmt.Errorf("--to: want a URL whose scheme is one of %s (got %q)",
			strings.Join(slices.Sorted(maps.Keys(relayTargets)), ", "), scheme))
	}
	t, err := build(raw)
	if err != nil {
		return relayTarget{}, usageError(fmt.Errorf("--to: %w", err))
	}
	return t, nil
}

// amqpTarget publishes to RabbitMQ (module github.com/idemgo/idem/rabbitoutbox):
// amqp://user:pass@host:port/vhost?exchange=NAME[&routing_key=KEY].
func amqpTarget(raw string) (relayTarget, error) {
	p, err := rabbitoutbox.FromURL(raw)
	if err != nil {
		return relayTarget{}, err
	}
	return relayTarget{d: p, desc: "RabbitMQ " + p.String(), close: p.Close, connect: p.Connect}, nil
}
