#!/usr/bin/env bash
# TFRecords from object storage and HTTP through the real binary (the optimised build),
# remote.c. Real TensorFlow writes 512 Fashion-MNIST images as PNG TFRecords (4 shards,
# one GZIP); the local files' run gives the reference weights hash.
# S3: SeaweedFS's S3 gateway (a real S3-compatible server, e2e/cluster/build-seaweedfs.sh
# builds it once per machine, remote/seaweedfs.sh starts it), on loopback with one
# identity: the shards under a prefix with 1,001 other keys between the first shard and
# the others, so that the glob's listing takes two ListObjectsV2 pages; a run from s3://
# ends with the local hash, with the credentials in the environment and in a shared
# credentials file, held in memory decoded (the default --data-cache-mib) and streamed
# (--data-cache-mib 0: the records read by ranged GETs when the shuffled order wants
# them); held, the open makes one request a listing page and one an object (its log).
# A wrong secret exits 3 (403, the credentials named), a missing key 3 (404), a prefix
# with no match 3. Streaming 100 MB of objects (4 shards of 64x64x3 raw examples,
# --data-cache-mib 1) peaks within 32 MiB of streaming 3 MiB of them; an object replaced
# under a running job exits 3 naming it (its ETag changed).
# HTTP: the failures a real server does not produce on demand come from a stand-in,
# remote/standin.py: a reset mid-object once (resumed from the byte reached, the local
# hash) and every time, a body that stalls and a 503 each exit 75 naming the object; a
# server that starts answering 503 under a job streaming from it exits 75 naming the
# object once the retries run out (SeaweedFS does not fail on demand).
# A URL's userinfo and query string (a presigned URL's X-Amz-Signature) appear in no
# message, log line or termination message: a 404 and a 503 with both. A comma inside a
# URL is written %2C (a comma separates patterns); a raw one exits 3 saying so.
set -uo pipefail # no -e: a failed check is reported (not ok) and the test goes on
source e2e/lib/tap.sh
source trainer/tests/lib.sh
source trainer/tests/remote/seaweedfs.sh
BIN=${TRAINER_OPT:-${BUILD:-build}/bin/kubetrain-trainer}
DATA=/usr/share/datasets/fashion-mnist
PY=${KT_CACHE:-$HOME/.cache/kubetrain}/venv-tf/bin/python
tmp=$(mktemp -d)
pids=()
cleanup() {
  local p
  # SIGKILL: their data goes with $tmp, and SeaweedFS takes 25 s to stop on SIGTERM
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
export KUBETRAIN_TERMINATION_FILE=$tmp/termination OPENBLAS_NUM_THREADS=1
unset TF_CONFIG KUBETRAIN_DATA KUBETRAIN_EVAL_DATA KUBETRAIN_DATA_DIR KUBETRAIN_DATASET \
  KUBETRAIN_S3_ENDPOINT AWS_ENDPOINT_URL AWS_ENDPOINT_URL_S3 AWS_REGION AWS_DEFAULT_REGION \
  AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_SESSION_TOKEN AWS_SHARED_CREDENTIALS_FILE \
  AWS_PROFILE KUBETRAIN_REMOTE_RETRIES KUBETRAIN_REMOTE_TIMEOUT
# No ~/.aws/credentials of the machine's; the build cache stays where it is.
export KT_CACHE=${KT_CACHE:-$HOME/.cache/kubetrain} HOME=$tmp

if [[ ! -x $BIN ]]; then
  tap_fail "the optimised trainer is built" "missing $BIN (make test builds it)"
  tap_done; exit
fi
skip_without_data "remote TFRecord sources" "$DATA"
if ! py_has "$PY" tensorflow; then
  tap_skip "remote TFRecord sources" "no TensorFlow in $PY (bash bench/pyvenv.sh venv-tf makes it)"
  tap_done; exit
fi

mkdir "$tmp/local"
TF_CPP_MIN_LOG_LEVEL=3 "$PY" - "$DATA" "$tmp/local" <<'PY' 2>"$tmp/tf.err" ||
import gzip, os, sys
import numpy as np
import tensorflow as tf
src, out = sys.argv[1:3]
# 256 random 64x64x3 raw examples (3 MiB of records), and 4 shards of 8 copies (100 MB).
x = np.random.default_rng(7).integers(0, 256, (256, 64, 64, 3), dtype=np.uint8)
big = os.path.join(os.path.dirname(out), "big")
os.mkdir(big)
with tf.io.TFRecordWriter(f"{big}/unit") as w:
    for i in range(len(x)):
        w.write(tf.train.Example(features=tf.train.Features(feature={
            "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[x[i].tobytes()])),
            "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[i % 10]))}))
            .SerializeToString())
unit = open(f"{big}/unit", "rb").read()
for s in range(4):
    with open(f"{big}/big-{s:05d}-of-00004", "wb") as f:
        for _ in range(8):
            f.write(unit)
with gzip.open(f"{src}/train-images-idx3-ubyte.gz") as f:
    x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28, 1)[:512]
with gzip.open(f"{src}/train-labels-idx1-ubyte.gz") as f:
    y = np.frombuffer(f.read(), np.uint8, offset=8)[:512]
for s in range(4):
    opts = tf.io.TFRecordOptions(compression_type="GZIP" if s == 1 else None)
    with tf.io.TFRecordWriter(f"{out}/train-{s:05d}-of-00004", opts) as w:
        for i in range(s * 128, (s + 1) * 128):
            w.write(tf.train.Example(features=tf.train.Features(feature={
                "image": tf.train.Feature(bytes_list=tf.train.BytesList(
                    value=[tf.io.encode_png(x[i]).numpy()])),
                "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(y[i])]))}))
                .SerializeToString())
PY
  { tap_fail "TensorFlow writes the TFRecords" "$(tail -3 "$tmp/tf.err")"; tap_done; exit; }

short=(--epochs 1 --steps-per-epoch 8 --per-worker-batch 64 --seed 7 --print-weights-hash)
one=(--epochs 1 --steps-per-epoch 1 --per-worker-batch 4 --seed 7)
run_trainer local "${short[@]}" --data "tfrecord:$tmp/local/train-*"
want=$(run_hash local)
if [[ ${#want} -eq 64 ]]; then tap_ok "the local shards train (reference hash)"
else tap_fail "the local shards train" "$(tail -3 "$tmp/local.err")"; tap_done; exit; fi

# same_hash NAME DESC: run NAME exited 0 with the local files' weights hash.
same_hash() {
  local got; got=$(run_hash "$1")
  if [[ $got == "$want" ]]; then tap_ok "$2: the weights hash of the local files"
  else tap_fail "$2" "'$got' vs '$want': $(tail -3 "$tmp/$1.err")"; fi
}

# ---------------------------------------------------------------- S3 (SeaweedFS)
s3_tests() {
  local port key=KTTESTKEY secret=kt-test-secret bucket=kt-data
  if ! weed_start "$tmp/weed" "$key" "$secret" 2>"$tmp/weed-start.err"; then
    [[ -n ${WEED_PID:-} ]] && pids+=("$WEED_PID")
    tap_fail "SeaweedFS's S3 gateway starts" "$(cat "$tmp/weed-start.err")"; return
  fi
  pids+=("$WEED_PID")
  port=$WEED_PORT
  local s3=("${WEED_CURL[@]}")
  if ! "${s3[@]}" -X PUT -o /dev/null "http://127.0.0.1:$port/$bucket" 2>"$tmp/put.err"; then
    tap_fail "SeaweedFS's S3 gateway makes a bucket" \
      "$(cat "$tmp/put.err"; tail -5 "$tmp/weed/weed.log")"
    return
  fi
  for f in "$tmp"/local/train-*; do
    "${s3[@]}" -T "$f" "http://127.0.0.1:$port/$bucket/fmnist/${f##*/}" >/dev/null ||
      { tap_fail "upload ${f##*/}" "$(tail -5 "$tmp/weed/weed.log")"; return; }
  done
  # 1,001 keys under the prefix, sorted between the first shard and the others, that the
  # glob does not match ('*' does not cross '/'): the listing's first page (1,000 keys)
  # ends before the second shard.
  echo decoy >"$tmp/decoy"
  seq -f "fmnist/train-00001-a/%04g" 0 1000 |
    xargs -P 4 -I{} "${s3[@]}" -T "$tmp/decoy" "http://127.0.0.1:$port/$bucket/{}" ||
    { tap_fail "upload the decoys" "$(tail -5 "$tmp/weed/weed.log")"; return; }

  export AWS_ENDPOINT_URL=http://127.0.0.1:$port AWS_REGION=us-east-1
  export AWS_ACCESS_KEY_ID=$key AWS_SECRET_ACCESS_KEY=$secret
  run_trainer s3 "${short[@]}" --data "tfrecord:s3://$bucket/fmnist/train-*"
  same_hash s3 "tfrecord:s3://$bucket/fmnist/train-* (two listing pages, env credentials)"
  # Held, each object is read once at open, in one GET (the GZIP one too: its compressed
  # bytes read ahead in REMOTE_RANGE_BYTES, not a GET per inflater read): the listing's
  # two pages and the four shards, as the trainer's own account of its requests says.
  local opened what="held from s3://: 6 requests at open (2 listing pages, 4 objects)"
  opened=$(grep -o "object storage at open: [0-9]* requests" "$tmp/s3.err" | grep -o "[0-9]*")
  if [[ $opened == 6 ]]; then tap_ok "$what"
  else tap_fail "$what" \
    "got '${opened:-no line}': $(grep "object storage" "$tmp/s3.err")"; fi
  if grep -q "$secret" "$tmp/s3.out" "$tmp/s3.err"; then
    tap_fail "the secret is never logged" "$(grep "$secret" "$tmp/s3.err")"
  else tap_ok "the secret is never logged"; fi

  printf '[other]\naws_access_key_id = x\naws_secret_access_key = y\n[kt]\n' >"$tmp/creds"
  printf 'aws_access_key_id = %s\naws_secret_access_key = %s\n' "$key" "$secret" >>"$tmp/creds"
  AWS_ACCESS_KEY_ID='' AWS_SECRET_ACCESS_KEY='' AWS_SHARED_CREDENTIALS_FILE=$tmp/creds \
    AWS_PROFILE=kt run_trainer s3file "${short[@]}" --data "tfrecord:s3://$bucket/fmnist/train-*"
  same_hash s3file "credentials from AWS_SHARED_CREDENTIALS_FILE, profile kt"

  AWS_SECRET_ACCESS_KEY=wrong expect_exit "403 (a wrong secret)" 3 \
    "fmnist/train-*: HTTP 403 Forbidden (SignatureDoesNotMatch): check the credentials" \
    "${one[@]}" --data "tfrecord:s3://$bucket/fmnist/train-*"
  expect_exit "404 (a missing key)" 3 \
    "s3://$bucket/fmnist/train-00009-of-00004: HTTP 404 Not Found (NoSuchKey): check the bucket" \
    "${one[@]}" --data "tfrecord:s3://$bucket/fmnist/train-00009-of-00004"
  expect_exit "an empty prefix" 3 "s3://$bucket/empty/train-*: matches no object" \
    "${one[@]}" --data "tfrecord:s3://$bucket/empty/train-*"

  # Streamed: the uncompressed shards' records by ranged GETs, the GZIP one inflated from
  # ranged GETs of its compressed bytes (inflater.h).
  run_trainer s3stream "${short[@]}" --data-cache-mib 0 \
    --data "tfrecord:s3://$bucket/fmnist/train-*"
  same_hash s3stream "streamed from s3:// (--data-cache-mib 0)"
  grep -q "streamed, decoded when read" "$tmp/s3stream.err" &&
    tap_ok "s3:// past --data-cache-mib: streamed" ||
    tap_fail "s3:// past --data-cache-mib: streamed" "$(cat "$tmp/s3stream.err")"

  # Peak RSS streaming 100 MB of objects against 3 MiB of them, the cache 1 MiB. The
  # margin, as test-tfrecord-stream.sh's: what the 100 MB set adds is its index (8,192
  # examples x 20 bytes), the pass at open's window (8 MiB, a range) and one batch's
  # records (32 x 12 KiB, with gaps of at most 64 KiB between records read together).
  for f in "$tmp"/big/*; do
    "${s3[@]}" -T "$f" "http://127.0.0.1:$port/$bucket/big/${f##*/}" >/dev/null ||
      { tap_fail "upload big/${f##*/}" "$(tail -5 "$tmp/weed/weed.log")"; return; }
  done
  echo '{"input_shape": [64, 64, 3],
    "layers": [{"type": "Flatten"}, {"type": "Dense", "units": 10}]}' >"$tmp/linear.json"
  local rss=(--model "$tmp/linear.json" --image-shape "64,64,3" --epochs 1 --steps-per-epoch 40
             --per-worker-batch 32 --seed 7 --data-cache-mib 1)
  local small big data_kib margin=$((32 * 1024))
  small=$(peak_rss rsssmall "${rss[@]}" --data "tfrecord:s3://$bucket/big/unit")
  big=$(peak_rss rssbig "${rss[@]}" --data "tfrecord:s3://$bucket/big/big-*")
  data_kib=$(( $(cat "$tmp"/big/big-* | wc -c) / 1024 ))
  if [[ $(cat "$tmp/rsssmall.rc") == 0 && $(cat "$tmp/rssbig.rc") == 0 && -n $small &&
        -n $big && $big -lt $((small + margin)) ]]; then
    tap_ok "peak RSS streaming $((data_kib / 1024)) MiB of objects: $((big / 1024)) MiB (3 MiB\
 of them: $((small / 1024)) MiB; bound: + $((margin / 1024)) MiB)"
  else
    tap_fail "peak RSS streaming 100 MB of objects stays within 32 MiB of 3 MiB's" \
      "big ${big:-?} KiB (rc $(cat "$tmp/rssbig.rc")), small ${small:-?} KiB (rc $(cat \
      "$tmp/rsssmall.rc")): $(tail -2 "$tmp/rssbig.err")"
  fi

  # The read-ahead (docs/design.md, "Streamed objects"): the rssbig run held what its
  # 1 MiB budget let it of the shuffle buffer's records, read in source order; the rest
  # were read when used. The same examples, so the weights of the same files read locally.
  run_trainer bigloc "${rss[@]}" --print-weights-hash --data "tfrecord:$tmp/big/big-*"
  run_trainer bigs3 "${rss[@]}" --print-weights-hash --data "tfrecord:s3://$bucket/big/big-*"
  local bigwant got held
  bigwant=$(run_hash bigloc)
  got=$(run_hash bigs3)
  local ahead='.*tfrecord: \([0-9]*\) of the \([0-9]*\) examples read from object'
  held=$(sed -n "s/$ahead storage or compressed files came from the read-ahead.*/\\1 \\2/p" \
    "$tmp/bigs3.err")
  if [[ ${#bigwant} -eq 64 && $got == "$bigwant" && -n $held && ${held% *} -gt 0 &&
        ${held% *} -lt ${held#* } ]]; then
    tap_ok "read ahead within --data-cache-mib 1: ${held% *} of ${held#* } examples held when\
 read, the weights of the local files"
  else
    tap_fail "read ahead within --data-cache-mib 1: some examples held, the local weights" \
      "'$got' vs '$bigwant', held '${held:-}': $(tail -3 "$tmp/bigs3.err")"
  fi
  # Two workers (each reads ahead its slices of each step alone), all of it held.
  local two=(launch --workers 2 --model "$tmp/linear.json" --image-shape "64,64,3" --epochs 1
             --steps-per-epoch 30 --per-worker-batch 16 --seed 7 --print-weights-hash
             --shuffle-buffer 1024)
  run_trainer twoloc "${two[@]}" --data-cache-mib 0 --data "tfrecord:$tmp/big/big-*"
  run_trainer twos3 "${two[@]}" --data-cache-mib 40 --data "tfrecord:s3://$bucket/big/big-*"
  bigwant=$(run_hash twoloc)
  got=$(run_hash twos3)
  held=$(grep -c "came from the read-ahead of the shuffle buffer" "$tmp/twos3.err")
  if [[ ${#bigwant} -eq 64 && $got == "$bigwant" && $held -eq 2 ]] &&
     ! grep "came from the read-ahead" "$tmp/twos3.err" | grep -qv "(100%"; then
    tap_ok "two workers read ahead (shuffle buffer 1,024), every example held: the local weights"
  else
    tap_fail "two workers read ahead, every example held: the local weights" \
      "'$got' vs '$bigwant': $(grep -h "read-ahead\|error\|exit" "$tmp/twos3.err" | tail -4)"
  fi

  # An object replaced under a running job: the next ranged GET of it finds another ETag.
  "$BIN" --epochs 1 --steps-per-epoch 400 --per-worker-batch 64 --seed 7 --data-cache-mib 0 \
    --metrics-file "$tmp/replace.jsonl" --data "tfrecord:s3://$bucket/fmnist/train-*" \
    >"$tmp/replace.out" 2>"$tmp/replace.err" &
  local pid=$! rc obj=fmnist/train-00000-of-00004
  first_step "$pid" "$tmp/replace.jsonl"
  { cat "$tmp/local/${obj#*/}"; echo appended; } >"$tmp/replaced"
  "${s3[@]}" -T "$tmp/replaced" "http://127.0.0.1:$port/$bucket/$obj" >/dev/null
  wait "$pid"
  rc=$?
  local needle="s3://$bucket/$obj: the object changed since the trainer opened it (its ETag is now"
  if [[ $rc -eq 3 ]] && grep -qF "$needle" "$tmp/replace.err"; then
    tap_ok "an object replaced under a running job: exit 3 ($(grep -F "$needle" \
      "$tmp/replace.err"))"
  else tap_fail "an object replaced under a running job: exit 3 naming it" \
    "rc=$rc: $(tail -3 "$tmp/replace.err")"; fi
  unset AWS_ENDPOINT_URL AWS_REGION AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY
}
s3_tests

# ---------------------------------------------------------------- HTTP (a stand-in)
python3 trainer/tests/remote/standin.py "$tmp/local" "$tmp/standin.port" \
  2>"$tmp/standin.err" &
pids+=($!)
for _ in $(seq 50); do [[ -s $tmp/standin.port ]] && break; sleep 0.1; done
base=http://127.0.0.1:$(cat "$tmp/standin.port")
export KUBETRAIN_REMOTE_RETRIES=2 KUBETRAIN_REMOTE_TIMEOUT=1
# urls MODE: the four shards, the third through the stand-in's MODE, the others whole.
urls() {
  printf '%s/files/train-00000-of-00004,%s/files/train-00001-of-00004,' "$base" "$base"
  printf '%s/%s/train-00002-of-00004,%s/files/train-00003-of-00004' "$base" "$1" "$base"
}
run_trainer http "${short[@]}" --data "tfrecord:$(urls files)"
same_hash http "http:// objects"
run_trainer resetonce "${short[@]}" --data "tfrecord:$(urls reset-once)"
same_hash resetonce "a reset mid-object, then the rest by range"
grep -q "reset-once/train-00002-of-00004: .* at byte [1-9][0-9]*; retry 1 of 2" \
  "$tmp/resetonce.err" && tap_ok "the reset was retried from the byte reached" ||
  tap_fail "the reset was retried from the byte reached" "$(cat "$tmp/resetonce.err")"
obj=train-00002-of-00004
expect_exit "a reset mid-object every time" 75 "$base/reset/$obj: " \
  "${one[@]}" --data "tfrecord:$(urls reset)"
grep -q "after 2 retries (KUBETRAIN_REMOTE_RETRIES); retryable, exiting 75" \
  "$tmp/a reset mid-object every time.err" && tap_ok "the reset: the retries ran out" ||
  tap_fail "the reset: the retries ran out" "$(cat "$tmp/a reset mid-object every time.err")"
start=$(date +%s)
expect_exit "a slow body" 75 "$base/slow/$obj: Operation too slow" \
  "${one[@]}" --data "tfrecord:$(urls slow)"
took=$(( $(date +%s) - start ))
# The stand-in stalls 60 s a request; curl's low-speed check takes a few seconds to judge.
if (( took < 45 )); then tap_ok "a slow body: gave up in ${took}s (timeout 1 s, 2 retries)"
else tap_fail "a slow body: gave up in time" "${took}s"; fi
expect_exit "503 every time" 75 "$base/503/$obj: HTTP 503, after 2 retries" \
  "${one[@]}" --data "tfrecord:$(urls 503)"

# A server that starts failing under a job streaming from it: the stand-in answers 503
# once $tmp/local/failing exists (SeaweedFS cannot be made to), after the job's first step.
"$BIN" --epochs 1 --steps-per-epoch 400 --per-worker-batch 64 --seed 7 --data-cache-mib 0 \
  --metrics-file "$tmp/failing.jsonl" --data "tfrecord:$(urls failing)" \
  >"$tmp/failing.out" 2>"$tmp/failing.err" &
pid=$!
first_step "$pid" "$tmp/failing.jsonl"
touch "$tmp/local/failing"
wait "$pid"
rc=$?
needle="$base/failing/$obj: HTTP 503, after 2 retries (KUBETRAIN_REMOTE_RETRIES); retryable"
if [[ $rc -eq 75 ]] && grep -qF "$needle" "$tmp/failing.err"; then
  tap_ok "a server failing under a running job: exit 75 ($(grep -F "$needle" "$tmp/failing.err"))"
else tap_fail "a server failing under a running job: exit 75 naming the object" \
  "rc=$rc: $(tail -3 "$tmp/failing.err")"; fi

# A presigned URL's secrets, and a user and password in the URL.
sig='X-Amz-Credential=AKIAKTTESTCRED%2F20261129&X-Amz-Signature=0fkttestsignature0'
auth=http://ktuser:ktpassword@${base#http://}
hidden="http://[redacted]@${base#http://}"
# no_secrets NAME: run NAME's stderr and termination message hold none of them.
no_secrets() {
  if grep -E "AKIAKTTESTCRED|kttestsignature|ktuser|ktpassword" "$tmp/$1.err" \
    "$tmp/termination"; then
    tap_fail "$1: the URL's secrets are never logged" "$(grep -h Amz "$tmp/$1.err")"
  else tap_ok "$1: the URL's secrets are never logged"; fi
}
expect_exit "404 of a presigned URL" 3 \
  "$hidden/files/train-00009-of-00004?[redacted]: HTTP 404 Not Found" \
  "${one[@]}" --data "tfrecord:$auth/files/train-00009-of-00004?$sig"
no_secrets "404 of a presigned URL"
expect_exit "503 of a presigned URL" 75 "$hidden/503/$obj?[redacted]: HTTP 503, after 2 retries" \
  "${one[@]}" --data "tfrecord:$auth/503/$obj?$sig"
grep -qF "$hidden/503/$obj?[redacted]: HTTP 503 at byte 0; retry 2 of 2" \
  "$tmp/503 of a presigned URL.err" && tap_ok "503 of a presigned URL: the retries' log lines" ||
  tap_fail "503 of a presigned URL: the retries' log lines" \
    "$(cat "$tmp/503 of a presigned URL.err")"
no_secrets "503 of a presigned URL"

# A comma in an object's name: %2C in the URL; raw, it splits the list.
cp "$tmp/local/$obj" "$tmp/local/train,00002-of-00004"
comma() {
  printf '%s/files/train-00000-of-00004,%s/files/train-00001-of-00004,' "$base" "$base"
  printf '%s/files/train%s00002-of-00004,%s/files/train-00003-of-00004' "$base" "$1" "$base"
}
run_trainer comma "${short[@]}" --data "tfrecord:$(comma %2C)"
same_hash comma "a comma in a URL written %2C"
expect_exit "a raw comma in a URL" 3 \
  "tfrecord: '00002-of-00004' matches no file (a comma separates patterns: inside a URL, write" \
  "${one[@]}" --data "tfrecord:$(comma ,)"
tap_done
