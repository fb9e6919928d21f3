# shellcheck shell=bash
# SeaweedFS's S3 gateway on this machine: the real S3-compatible server of the trainer's
# object-storage test (test-remote-data.sh) and of `make bench-data`, on loopback, and of
# the e2e suite's s3 scenario, on the node's address for the pods. Source it from the
# repository root.
#
# weed_start DIR KEY SECRET: builds weed once per machine (e2e/cluster/build-seaweedfs.sh),
# starts `weed server` (master, volume, filer, S3; at nice WEED_NICE, default 15) with its
# data and log in DIR and one identity KEY/SECRET allowed everything, and waits (up to
# 120 s) until the gateway answers a signed request. WEED_IP (default 127.0.0.1) is the
# address every listener binds, e.g. a cluster node's address that its pods reach. Sets
# WEED_PID (the caller stops it: weed_stop, or kill "$WEED_PID"), WEED_PORT (the S3 port
# on WEED_IP) and WEED_CURL, an array: curl signing for the identity (SigV4), for the
# caller's bucket and uploads, e.g. "${WEED_CURL[@]}" -X PUT
# "http://127.0.0.1:$WEED_PORT/BUCKET". Returns 1 with the reason on stderr.

weed_start() {
  local dir=$1 weed p ip=${WEED_IP:-127.0.0.1}
  WEED_CURL=(curl -sS --fail --aws-sigv4 "aws:amz:us-east-1:s3" --user "$2:$3"
             -H "x-amz-content-sha256: UNSIGNED-PAYLOAD")
  mkdir -p "$dir/data" || return 1
  if ! weed=$(nice -n 15 e2e/cluster/build-seaweedfs.sh 2>"$dir/build.err"); then
    echo "SeaweedFS is not built: $(tail -3 "$dir/build.err")" >&2
    return 1
  fi
  # Every listener on a port of its own (the gRPC ones default to port + 10000, which may
  # be taken or past 65535); the services not used are off.
  read -r -a p < <(python3 -c 'import socket, sys
ss = [socket.socket() for _ in range(8)]
for s in ss: s.bind((sys.argv[1], 0))
print(*[s.getsockname()[1] for s in ss])' "$ip")
  WEED_PORT=${p[6]}
  cat >"$dir/s3.json" <<JSON
{"identities": [{"name": "kubetrain",
  "credentials": [{"accessKey": "$2", "secretKey": "$3"}],
  "actions": ["Admin", "Read", "List", "Write"]}]}
JSON
  nice -n "${WEED_NICE:-15}" "$weed" server -ip="$ip" -ip.bind="$ip" -dir="$dir/data" \
    -master.port="${p[0]}" -master.port.grpc="${p[1]}" -master.volumeSizeLimitMB=64 \
    -volume.port="${p[2]}" -volume.port.grpc="${p[3]}" -volume.max=8 \
    -filer -filer.port="${p[4]}" -filer.port.grpc="${p[5]}" \
    -s3 -s3.port="$WEED_PORT" -s3.port.grpc="${p[7]}" -s3.config="$dir/s3.json" \
    -s3.port.iceberg=0 -s3.port.lance=0 -iam=false \
    >"$dir/weed.log" 2>&1 &
  WEED_PID=$!
  local _
  for _ in $(seq 120); do
    "${WEED_CURL[@]}" -o /dev/null "http://$ip:$WEED_PORT/" 2>/dev/null && return 0
    kill -0 "$WEED_PID" 2>/dev/null || break
    sleep 1
  done
  echo "SeaweedFS's S3 gateway did not answer on $ip:$WEED_PORT:" \
    "$(tail -5 "$dir/weed.log")" >&2
  return 1
}

# weed_stop: stops weed_start's server at once and waits for it: SIGKILL, for its data is
# the caller's to delete, and a graceful stop (SIGTERM) takes it 25 s.
weed_stop() {
  [ -n "${WEED_PID:-}" ] || return 0
  kill -KILL "$WEED_PID" 2>/dev/null
  wait "$WEED_PID" 2>/dev/null
  WEED_PID=
}
