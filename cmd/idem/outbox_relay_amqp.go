package main

import (
	"github.com/idemgo/idem/outbox"
	"github.com/idemgo/idem/rabbitoutbox"
)

// --to amqp://USER:PASS@HOST:PORT/VHOST?exchange=NAME[&routing_key=KEY]
// (or amqps://): RabbitMQ (module rabbitoutbox).
func init() {
	amqp := func(raw string) (outbox.Deliverer, func() error, error) {
		p, err := rabbitoutbox.FromURL(raw)
		if err != nil {
			return nil, nil, err
		}
		return p, p.Close, nil
	}
	relayTargets["amqp"] = amqp
	relayTargets["amqps"] = amqp
}
