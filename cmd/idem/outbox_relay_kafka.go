package main

import (
	"github.com/idemgo/idem/kafkaoutbox"
	"github.com/idemgo/idem/outbox"
)

// --to kafka://HOST:PORT[,HOST:PORT...]/?topic_prefix=PREFIX (or
// ?topic=NAME): Kafka (module kafkaoutbox).
func init() {
	relayTargets["kafka"] = func(raw string) (outbox.Deliverer, func() error, error) {
		d, err := kafkaoutbox.FromURL(raw)
		if err != nil {
			return nil, nil, err
		}
		return d, d.Close, nil
	}
}
