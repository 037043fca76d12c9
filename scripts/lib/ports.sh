# Sourced by the throwaway-server scripts (pg.sh, redis.sh, mysql.sh,
# nats.sh, rabbitmq.sh, kafka.sh): how they pick their loopback ports.
#
# Their crash command restarts a server on the ports it had. A port inside
# the kernel's ephemeral range (net.ipv4.ip_local_port_range, 32768-60999 by
# default) is free for the outgoing connections of every process while the
# server is down, and the tests beside it open many: one that takes it makes
# the restart fail with "Address already in use". So free_port picks ports
# below that range, where connect(2) never takes one.

# port_in_use PORT: something listens on 127.0.0.1:PORT.
port_in_use() {
	{ (exec 3<>"/dev/tcp/127.0.0.1/$1"); } 2>/dev/null
}

# free_port prints a loopback port that nothing listens on, below the
# kernel's ephemeral range (from 20000; above the range if it starts lower
# than 21024, and anywhere from 20000 if neither side has room).
free_port() {
	local low high p try lo hi
	read -r low high </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || { low=32768 high=60999; }
	if [ "$low" -gt 21024 ] 2>/dev/null; then
		lo=20000 hi=$((low - 1))
	elif [ "$high" -lt 64511 ] 2>/dev/null; then
		lo=$((high + 1)) hi=65535
	else
		lo=20000 hi=59999
	fi
	for try in $(seq 50); do
		p=$((lo + (RANDOM * 32768 + RANDOM) % (hi - lo + 1)))
		if ! port_in_use "$p"; then
			echo "$p"
			return 0
		fi
	done
	echo "ports.sh: found no free loopback port in $lo-$hi in 50 tries" >&2
	return 1
}
