// Command kfakeserver runs kfake, franz-go's fake broker that speaks
// the Kafka protocol, on loopback ports, for the tests of kafkaoutbox and
// cmd/idem (scripts/kafka.sh starts it). It is not Apache Kafka: it
// implements the protocol (idempotent producers, acks, partitions, fetch)
// in one process, with no real replication.
//
// With -datadir it keeps its state in that directory (kfake's DataDir):
// the cluster's id and topics from their creation on, each produced batch
// written to its partition's segment file before the broker acknowledges
// it (not fsynced: the OS's page cache holds it, which survives the
// process's SIGKILL but not the machine's crash). Started again on the
// same directory, after a SIGKILL too, it reloads the topics and replays
// the segments. With -ports (comma-separated, one per broker) it listens
// on those loopback ports, as a restart must; else on free ones.
//
// It writes the brokers' addresses, comma-separated, to the file named by
// -addrfile once they listen, and runs until SIGTERM or SIGINT (then
// kfake saves its state to -datadir).
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/twmb/franz-go/pkg/kfake"
)

func main() {
	addrFile := flag.String("addrfile", "", "write the brokers' addresses (host:port,...) to this file")
	brokers := flag.Int("brokers", 3, "brokers in the cluster")
	partitions := flag.Int("partitions", 4, "partitions of a topic created with the default count")
	dataDir := flag.String("datadir", "", "keep the cluster's state in this directory (reloaded when it starts again)")
	portList := flag.String("ports", "", "listen on these loopback ports (comma-separated, one per broker; default: free ones)")
	flag.Parse()
	ports := make([]int, *brokers) // 0: any free port
	if *portList != "" {
		ps := strings.Split(*portList, ",")
		if len(ps) != *brokers {
			fmt.Fprintf(os.Stderr, "kfakeserver: -ports names %d ports for %d brokers\n", len(ps), *brokers)
			os.Exit(2)
		}
		for i, p := range ps {
			n, err := strconv.Atoi(strings.TrimSpace(p))
			if err != nil || n <= 0 || n > 65535 {
				fmt.Fprintf(os.Stderr, "kfakeserver: -ports: bad port %q\n", p)
				os.Exit(2)
			}
			ports[i] = n
		}
	}
	opts := []kfake.Opt{kfake.NumBrokers(*brokers), kfake.Ports(ports...), kfake.DefaultNumPartitions(*partitions),
		kfake.AllowAutoTopicCreation()}
	if *dataDir != "" {
		opts = append(opts, kfake.DataDir(*dataDir))
	}
	c, err := kfake.NewCluster(opts...)
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
