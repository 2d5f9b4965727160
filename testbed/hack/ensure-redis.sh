#!/usr/bin/env bash
# Makes sure a redis-server answers on 127.0.0.1:6379, installing Debian's package and starting a
# throwaway, non-persistent server if none does. Tests need a real Redis, never a stand-in.
set -euo pipefail
port=${REDIS_PORT:-6379}
ping() { if command -v redis-cli >/dev/null; then redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null | grep -q PONG;
         else (exec 3<>/dev/tcp/127.0.0.1/"$port" && printf 'PING\r\n' >&3 && head -c5 <&3 | grep -q PONG) 2>/dev/null; fi; }
if ping; then echo "redis: answering on 127.0.0.1:$port"; exit 0; fi
if ! command -v redis-server >/dev/null; then
  echo "redis: redis-server not found, installing Debian's redis-server"
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=600 update -qq && apt-get -o DPkg::Lock::Timeout=600 install -y -qq redis-server >/dev/null
fi
dir=${TMPDIR:-/tmp}/kubetrail-redis; mkdir -p "$dir"
redis-server --daemonize yes --bind 127.0.0.1 --port "$port" --save "" --appendonly no --dir "$dir" --logfile "$dir/redis.log"
for _ in $(seq 50); do ping && { echo "redis: started on 127.0.0.1:$port"; exit 0; }; sleep 0.1; done
echo "redis: redis-server did not answer on 127.0.0.1:$port (see $dir/redis.log)" >&2; exit 1
