// Command kfakeserver runs kfake, franz-go's in-memory broker that speaks
// the Kafka protocol, on loopback ports, for the tests of kafkaoutbox and
// cmd/idem (scripts/kafka.sh starts it). It is not Apache Kafka: it
// implements the protocol (idempotent producers, acks, partitions, fetch)
// in one process, with no real replication and, here, no disk.
//
// It writes the brokers' addresses, comma-separated, to the file named by
// -addrfile once they listen, and runs until SIGTERM or SIGINT.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/twmb/franz-go/pkg/kfake"
)

func main() {
	addrFile := flag.String("addrfile", "", "write the brokers' addresses (host:port,...) to this file")
	brokers := flag.Int("brokers", 3, "brokers in the cluster")
	partitions := flag.Int("partitions", 4, "partitions of a topic created with the default count")
	flag.Parse()
	ports := make([]int, *brokers) // 0: any free port
	c, err := kfake.NewCluster(kfake.NumBrokers(*brokers), kfake.Ports(ports...), kfake.DefaultNumPartitions(*partitions),
		kfake.AllowAutoTopicCreation())
	if err != nil {
		fmt.Fprintln(os.Stderr, "kfakeserver:", err)
		os.Exit(1)
	}
	defer c.Close()
	addrs := strings.Join(c.ListenAddrs(), ",")
	if *addrFile != "" {
		tmp := *addrFile + ".tmp"
		if err := os.WriteFile(tmp, []byte(addrs+"\n"), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "kfakeserver:", err)
			os.Exit(1)
		}
		if err := os.Rename(tmp, *addrFile); err != nil {
			fmt.Fprintln(os.Stderr, "kfakeserver:", err)
			os.Exit(1)
		}
	}
	fmt.Println("kfakeserver: listening on", addrs)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
}
