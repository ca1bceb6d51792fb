#!/usr/bin/env bash
# tests/multinode/nodes.sh — simulated cluster nodes for the multi-node tests: Linux network
# namespaces (ip-netns(8)) joined through a bridge, each node with its own network stack,
# hostname (a UTS namespace per entry, unshare(1)) and /etc/hosts (bind-mounted inside the
# node's own mount namespace), so OpenMPI (and Slurm) see separate hosts that talk TCP.
#
#   nodes.sh up DIR N         make nodes n0..n(N-1) (10.77.0.(10+i)/24, interface eth0 in each, a
#                             /tmp of its own: DIR/tmp-nI),
#                             writing DIR/hosts, DIR/hostfile ("nI slots=4"), DIR/agent (the rsh
#                             agent for OpenMPI: plm_rsh_agent) and DIR/state; exit 77 with the
#                             reason printed where namespaces cannot be made (not root, no ip netns)
#   nodes.sh down DIR         kill every process left in the nodes, delete the namespaces (their
#                             veths go with them) and DIR's generated files; always exit 0 if
#                             nothing is left
#   nodes.sh check DIR        exit 0 when DIR's nodes are up, else 77 with the reason (what a test
#                             that needs the fixture runs first)
#   nodes.sh exec DIR NODE CMD...   run CMD inside NODE (its network, hostname and /etc/hosts)
#   nodes.sh agent DIR HOST CMD...  the rsh agent: as ssh HOST CMD, the words of CMD joined and run by
#                             sh inside HOST (what OpenMPI's rsh launcher calls to start orted)
#   nodes.sh link DIR NODE up|down            bring NODE's link up or down (the switch side)
#   nodes.sh shape DIR RATE|off               tc tbf on every node's eth0 (e.g. 10gbit, 1gbit)
#   nodes.sh bytes DIR NODE                   bytes NODE's eth0 sent and received (tx rx)
#   nodes.sh slurm-up DIR     start Slurm on the nodes: slurmctld on n0 and one slurmd per node, from
#                             DIR/slurm/slurm.conf (auth/none and cred/none: no munge inside the
#                             sandbox; proctrack/linuxproc, no cgroups); srun / sinfo then work inside
#                             any node with SLURM_CONF=DIR/slurm/slurm.conf; exit 77 when Slurm is not
#                             installed (scripts/setup installs Debian's slurmctld, slurmd, slurm-client)
#   nodes.sh slurm-down DIR   stop the daemons (down does too: it ends every process in the nodes)
#
# The namespaces are named twk<PID>-nI and twk<PID>-sw (the switch, holding the bridge), PID the
# 'up' process's, so two fixtures never share one; the host's own network stack is never touched
# (every veth lives inside the namespaces). Needs root (CI runs the suite as root).
set -uo pipefail

die() { echo "nodes.sh: $*" >&2; exit 1; }
skip() { echo "SKIPPED: $*" >&2; exit 77; }

state_var() {  # state_var DIR NAME
  sed -n "s/^$2=//p" "$1/state" 2>/dev/null
}

cmd_up() {
  local dir=$1 n=$2
  [[ $n =~ ^[0-9]+$ && $n -ge 1 && $n -le 16 ]] || die "up: N must be 1..16, got '$n'"
  [[ $(id -u) == 0 ]] || skip "needs root to make network namespaces (ip netns add); running as uid $(id -u)"
  command -v ip >/dev/null || skip "no 'ip' command (iproute2)"
  command -v unshare >/dev/null || skip "no 'unshare' command (util-linux)"
  local id="twk$$"
  ip netns add "$id-probe" 2>/tmp/nodes.sh.$$ || { local why; why=$(cat /tmp/nodes.sh.$$); rm -f /tmp/nodes.sh.$$;
    skip "ip netns add failed: $why"; }
  rm -f /tmp/nodes.sh.$$
  ip netns del "$id-probe"
  if [[ -f $dir/state ]]; then cmd_down "$dir" >/dev/null; fi
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  [[ $dir != /tmp && $dir != /tmp/* ]] || die "up: DIR must not be under /tmp (each node has a /tmp of its own): $dir"
  {
    echo "id=$id"
    echo "nodes=$n"
  } > "$dir/state"
  # From here on a failure tears everything down again.
  trap 'echo "nodes.sh: up failed, cleaning up" >&2; cmd_down "$dir" >/dev/null' ERR
  set -e
  local sw="$id-sw"
  ip netns add "$sw"
  ip -n "$sw" link set lo up
  ip -n "$sw" link add br0 type bridge
  ip -n "$sw" link set br0 up
  : > "$dir/hosts.tmp"
  echo "127.0.0.1 localhost" >> "$dir/hosts.tmp"
  : > "$dir/hostfile"
  local i
  for ((i = 0; i < n; i++)); do
    local ns="$id-n$i" addr="10.77.0.$((10 + i))"
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    # the pair is made inside the switch namespace and one end moved into the node (renamed eth0)
    ip -n "$sw" link add "p$i" type veth peer name "c$i"
    ip -n "$sw" link set "c$i" netns "$ns"
    ip -n "$ns" link set "c$i" name eth0
    ip -n "$ns" addr add "$addr/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$sw" link set "p$i" master br0
    ip -n "$sw" link set "p$i" up
    echo "$addr n$i" >> "$dir/hosts.tmp"
    mkdir -p "$dir/tmp-n$i"
    chmod 1777 "$dir/tmp-n$i"
    echo "n$i slots=4" >> "$dir/hostfile"
  done
  mv "$dir/hosts.tmp" "$dir/hosts"
  local self
  self=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")
  printf '#!/bin/sh\n# rsh agent for OpenMPI (plm_rsh_agent): "agent HOST CMD..." runs CMD inside node HOST\nexec %q agent %q "$@"\n' \
    "$self" "$dir" > "$dir/agent"
  chmod +x "$dir/agent"
  set +e
  trap - ERR
  # every node reaches every other
  for ((i = 1; i < n; i++)); do
    # a TCP connect to a closed port: "refused" = reachable, a timeout = not (a new bridge port may
    # take a moment to forward)
    local try ok=0
    for try in 1 2 3 4 5 6 7 8 9 10; do
      local out
      out=$(cmd_exec "$dir" n0 timeout 2 bash -c "exec 3<>/dev/tcp/n$i/9" 2>&1)
      if [[ $out == *"Connection refused"* ]]; then
        ok=1
        break
      fi
      sleep 0.3
    done
    if [[ $ok != 1 ]]; then
      cmd_down "$dir" >/dev/null
      die "up: n0 cannot reach n$i"
    fi
  done
  echo "nodes.sh: $n nodes up in $dir ($id-n0..$id-n$((n - 1)), 10.77.0.10..$((9 + n))/24, hostfile $dir/hostfile)"
}

cmd_down() {
  local dir=$1
  local id n
  id=$(state_var "$dir" id)
  [[ -n $id ]] || { echo "nodes.sh: nothing up in $dir"; return 0; }
  n=$(state_var "$dir" nodes)
  local ns pids round
  # processes first (a daemon or rank left behind keeps a namespace alive), TERM then KILL
  for round in TERM KILL; do
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$id-"); do
      pids=$(ip netns pids "$ns" 2>/dev/null)
      [[ -n $pids ]] && kill "-$round" $pids 2>/dev/null
    done
    [[ $round == TERM ]] && sleep 0.5
  done
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$id-"); do
    ip netns del "$ns" 2>/dev/null || echo "nodes.sh: could not delete namespace $ns" >&2
  done
  rm -f "$dir/state" "$dir/hosts" "$dir/hostfile" "$dir/agent"
  rm -rf "$dir"/tmp-n* "$dir/slurm"
  local left
  left=$(ip netns list 2>/dev/null | awk '{print $1}' | grep -c "^$id-")
  [[ $left == 0 ]] || die "down: $left namespaces of $id left"
  echo "nodes.sh: $n nodes of $id removed"
}

cmd_check() {
  local dir=$1 id
  id=$(state_var "$dir" id)
  if [[ -z $id ]]; then
    skip "the simulated nodes are not up (fixture test multinode_*_up skipped or failed; needs root and ip netns)"
  fi
  ip netns list 2>/dev/null | awk '{print $1}' | grep -qx "$id-n0" || skip "namespace $id-n0 is gone"
  return 0
}

node_ns() {  # node_ns DIR NODE -> namespace name (NODE: nI, or its address)
  local dir=$1 node=$2 id
  id=$(state_var "$dir" id)
  [[ -n $id ]] || die "no nodes up in $dir"
  if [[ ! $node =~ ^n[0-9]+$ ]]; then
    local name
    name=$(awk -v h="$node" '$1 == h {print $2}' "$dir/hosts")
    [[ -n $name ]] || die "unknown node '$node' (hosts: $(awk 'NR > 1 {print $2}' "$dir/hosts" | tr '\n' ' '))"
    node=$name
  fi
  grep -q " $node\$" "$dir/hosts" || die "unknown node '$node'"
  echo "$id-$node"
}

cmd_exec() {
  local dir=$1 node=$2
  shift 2
  local ns
  ns=$(node_ns "$dir" "$node") || exit 1
  node=${ns##*-}
  # the node's network namespace, and a mount and a UTS namespace of this process tree's own for
  # the hostname, /etc/hosts bound to the nodes' table and a /tmp of the node's own (DIR/tmp-NODE:
  # MPI's session directories and Slurm's PMIx directories are per host); everything else, the
  # build and output directories included, is shared as on a cluster's shared filesystem (not ip
  # netns exec, which remounts /sys and so hides /sys/fs/cgroup, which slurmd needs)
  exec nsenter --net="/run/netns/$ns" unshare --uts --mount \
    sh -c 'hostname "$1" && mount --bind "$2" /etc/hosts && mount --bind "$3" /tmp && shift 3 && exec "$@"' \
    sh "$node" "$dir/hosts" "$dir/tmp-$node" "$@"
}

cmd_agent() {
  local dir=$1 host=$2
  shift 2
  # ssh joins its command words with spaces and hands them to the remote shell; so does this
  cmd_exec "$dir" "$host" /bin/sh -c "$*"
}

cmd_link() {
  local dir=$1 node=$2 how=$3 id
  id=$(state_var "$dir" id)
  [[ $how == up || $how == down ]] || die "link: up or down"
  ip -n "$id-sw" link set "p${node#n}" "$how"
}

cmd_shape() {
  local dir=$1 rate=$2 id n i
  id=$(state_var "$dir" id)
  n=$(state_var "$dir" nodes)
  for ((i = 0; i < n; i++)); do
    tc -n "$id-n$i" qdisc del dev eth0 root 2>/dev/null
    if [[ $rate != off ]]; then
      tc -n "$id-n$i" qdisc add dev eth0 root tbf rate "$rate" burst 1mb latency 50ms || die "tc tbf $rate failed"
    fi
  done
}

cmd_bytes() {
  local dir=$1 node=$2 ns
  ns=$(node_ns "$dir" "$node") || exit 1
  # ip netns exec remounts /sys for the namespace: its class/net is the node's
  echo "$(ip netns exec "$ns" cat /sys/class/net/eth0/statistics/tx_bytes) $(ip netns exec "$ns" cat /sys/class/net/eth0/statistics/rx_bytes)"
}

cmd_slurm_up() {
  local dir=$1 n i
  cmd_check "$dir"
  for b in slurmctld slurmd srun sinfo; do
    command -v "$b" >/dev/null || skip "Slurm is not installed (no $b; scripts/setup installs slurmctld, slurmd, slurm-client)"
  done
  [[ -e /usr/lib/x86_64-linux-gnu/slurm-wlm/auth_none.so || -n $(find / -name auth_none.so -path '*slurm*' 2>/dev/null | head -1) ]] ||
    skip "this Slurm has no auth/none plugin"
  n=$(state_var "$dir" nodes)
  local s="$dir/slurm"
  rm -rf "$s"
  mkdir -p "$s/state"
  {
    echo "# made by tests/multinode/nodes.sh slurm-up for the simulated nodes"
    echo "ClusterName=twinkle"
    echo "SlurmctldHost=n0(10.77.0.10)"
    echo "AuthType=auth/none"
    echo "CredType=cred/none"
    echo "SlurmUser=root"
    echo "SlurmdUser=root"
    echo "SlurmctldPort=6817"
    echo "SlurmdPort=6818"
    echo "StateSaveLocation=$s/state"
    echo "SlurmdSpoolDir=$s/spool-%n"
    echo "SlurmctldPidFile=$s/slurmctld.pid"
    echo "SlurmdPidFile=$s/slurmd-%n.pid"
    echo "SlurmctldLogFile=$s/slurmctld.log"
    echo "SlurmdLogFile=$s/slurmd-%n.log"
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=task/none"
    echo "SwitchType=switch/none"
    echo "MpiDefault=none"
    echo "ReturnToService=2"
    echo "SchedulerType=sched/builtin"
    echo "SelectType=select/linear"
    echo "SlurmdParameters=config_overrides"
    echo "JobAcctGatherType=jobacct_gather/none"
    echo "AccountingStorageType=accounting_storage/none"
    echo "InactiveLimit=0"
    echo "KillWait=5"
    echo "SlurmdTimeout=30"
    for ((i = 0; i < n; i++)); do
      echo "NodeName=n$i NodeAddr=10.77.0.$((10 + i)) CPUs=4 State=UNKNOWN"
    done
    echo "PartitionName=twinkle Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE"
  } > "$s/slurm.conf"
  for ((i = 0; i < n; i++)); do mkdir -p "$s/spool-n$i"; done
  (cmd_exec "$dir" n0 env SLURM_CONF="$s/slurm.conf" slurmctld -f "$s/slurm.conf") ||
    { echo "nodes.sh: slurmctld failed:"; tail -20 "$s/slurmctld.log" 2>/dev/null; exit 1; }
  for ((i = 0; i < n; i++)); do
    (cmd_exec "$dir" "n$i" env SLURM_CONF="$s/slurm.conf" slurmd -f "$s/slurm.conf") ||
      { echo "nodes.sh: slurmd on n$i failed:"; tail -20 "$s/slurmd-n$i.log" 2>/dev/null; exit 1; }
  done
  local try idle
  for try in $(seq 1 60); do
    idle=$(cmd_exec "$dir" n0 env SLURM_CONF="$s/slurm.conf" sinfo -h -N -o "%N %T" 2>/dev/null | grep -c " idle")
    [[ $idle == "$n" ]] && { echo "nodes.sh: Slurm up on $n nodes (SLURM_CONF=$s/slurm.conf)"; return 0; }
    sleep 0.5
  done
  echo "nodes.sh: the Slurm nodes did not become idle:"
  cmd_exec "$dir" n0 env SLURM_CONF="$s/slurm.conf" sinfo -N 2>&1
  tail -5 "$s"/*.log
  exit 1
}

cmd_slurm_down() {
  local dir=$1 id n i ns pids
  id=$(state_var "$dir" id)
  n=$(state_var "$dir" nodes)
  [[ -n $id ]] || { echo "nodes.sh: nothing up in $dir"; return 0; }
  for ((i = 0; i < n; i++)); do
    for f in "$dir/slurm/slurmd-n$i.pid" "$dir/slurm/slurmctld.pid"; do
      [[ -f $f ]] && kill "$(cat "$f")" 2>/dev/null
    done
  done
  sleep 0.5
  # anything Slurm left (steps' stepd processes) inside the nodes
  for ((i = 0; i < n; i++)); do
    ns="$id-n$i"
    pids=$(ip netns pids "$ns" 2>/dev/null)
    [[ -n $pids ]] && kill -KILL $pids 2>/dev/null
  done
  echo "nodes.sh: Slurm stopped in $dir"
}

[[ $# -ge 2 ]] || die "usage: nodes.sh up|down|check|exec|agent|link|shape|bytes DIR ..."
sub=$1
shift
case $sub in
  up) [[ $# == 2 ]] || die "usage: nodes.sh up DIR N"; cmd_up "$@" ;;
  down) cmd_down "$1" ;;
  check) cmd_check "$1" ;;
  exec) [[ $# -ge 3 ]] || die "usage: nodes.sh exec DIR NODE CMD..."; cmd_exec "$@" ;;
  agent) [[ $# -ge 3 ]] || die "usage: nodes.sh agent DIR HOST CMD..."; cmd_agent "$@" ;;
  link) cmd_link "$@" ;;
  shape) cmd_shape "$@" ;;
  bytes) cmd_bytes "$@" ;;
  slurm-up) cmd_slurm_up "$1" ;;
  slurm-down) cmd_slurm_down "$1" ;;
  *) die "unknown subcommand '$sub'" ;;
esac
