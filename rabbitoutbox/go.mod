module github.com/idemgo/idem/rabbitoutbox

go 1.26.8

require (
	github.com/idemgo/idem v0.0.0
	github.com/rabbitmq/amqp091-go v1.17.0
)
