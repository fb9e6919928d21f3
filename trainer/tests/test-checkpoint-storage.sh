#!/usr/bin/env bash
# The real binary (ASan+UBSan build) against a checkpoint directory that misbehaves: a
# corrupt checkpoint with a higher step than the run's, kept by --keep-checkpoints 1 while
# the run's own were deleted (a restart then found only it and exited 3); another model's
# checkpoint with a higher step (a restart exited 3 though its own were there); a forged one
# whose crc holds but whose data position is 2^62 (the pipeline walked there forever); and a
# volume that fills up mid-run (a real tmpfs with a size limit: root mounts it), which must
# exit 75 (retried), say "disk full" naming the checkpoint, keep the older checkpoints and
# resume from them once there is room.
set -euo pipefail
source e2e/lib/tap.sh
source trainer/tests/lib.sh
BIN=${TRAINER:-build/san/bin/kubetrain-trainer}
DATA=/usr/share/datasets/fashion-mnist
tmp=$(mktemp -d)
mounted=
cleanup() {
  if [[ -n $mounted ]]; then umount "$mounted" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
unset TF_CONFIG KUBETRAIN_SECRET KUBETRAIN_SECRET_FILE
export OPENBLAS_NUM_THREADS=1 KUBETRAIN_TERMINATION_FILE=$tmp/termination

if [ ! -x "$BIN" ]; then tap_skip "checkpoint storage" "$BIN is not built"; tap_done; exit; fi
skip_without_data "checkpoint storage" "$DATA"

# mlp with SGD: 101770 parameters, no optimizer state, 407444 bytes per checkpoint
run=(--model mlp --per-worker-batch 8 --seed 5 --tensorboard-dir "$tmp/tb")
ls_ck() { (cd "$1" && ls -A | tr '\n' ' '); }

# --- a corrupt checkpoint newer than the run's, --keep-checkpoints 1 ---------------------
ck=$tmp/ck
"$BIN" "${run[@]}" --epochs 1 --steps-per-epoch 2 --checkpoint-dir "$ck" >/dev/null 2>&1
cp "$ck/ckpt-2.kt" "$ck/ckpt-1000.kt"
printf '\xff' | dd of="$ck/ckpt-1000.kt" bs=1 seek=5000 conv=notrunc status=none
rc=0
"$BIN" "${run[@]}" --epochs 2 --steps-per-epoch 6 --checkpoint-dir "$ck" \
  --checkpoint-every-steps 2 --keep-checkpoints 1 >/dev/null 2>"$tmp/k1.err" || rc=$?
# shellcheck disable=SC2010 # names the trainer writes: ckpt-N.kt and the like
if [[ $rc -eq 0 && -f $ck/ckpt-12.kt && ! -e $ck/ckpt-1000.kt && -f $ck/ckpt-1000.kt.bad ]] &&
   [[ $(ls "$ck" | grep -c '^ckpt-[0-9]*\.kt$') -eq 1 ]] &&
   grep -q "ckpt-1000.kt: checksum mismatch .*moved aside to .*ckpt-1000.kt.bad" "$tmp/k1.err"
then
  tap_ok "--keep-checkpoints 1 keeps the checkpoint just written, moves the corrupt newer one aside"
else
  tap_fail "--keep-checkpoints 1 with a corrupt newer checkpoint" \
    "rc=$rc dir: $(ls_ck "$ck"); $(tail -3 "$tmp/k1.err")"
fi
rc=0
"$BIN" "${run[@]}" --epochs 3 --steps-per-epoch 6 --checkpoint-dir "$ck" --keep-checkpoints 1 \
  >/dev/null 2>"$tmp/k2.err" || rc=$?
if [[ $rc -eq 0 ]] && grep -q "resuming from .*ckpt-12.kt" "$tmp/k2.err"; then
  tap_ok "the restart resumes from the run's own newest checkpoint (step 12)"
else
  tap_fail "restart after --keep-checkpoints 1" \
    "rc=$rc dir: $(ls_ck "$ck"); $(tail -3 "$tmp/k2.err")"
fi

# --- another model's checkpoint, newer than the run's, at a restart ---------------------
ck=$tmp/ck-foreign
"$BIN" "${run[@]}" --epochs 1 --steps-per-epoch 2 --checkpoint-dir "$ck" >/dev/null 2>&1
"$BIN" --model tutorial-cnn --per-worker-batch 8 --epochs 1 --steps-per-epoch 1 \
  --checkpoint-dir "$tmp/cnn" --tensorboard-dir "$tmp/tb" >/dev/null 2>&1
cp "$tmp/cnn/ckpt-1.kt" "$ck/ckpt-1000.kt"
rc=0
"$BIN" "${run[@]}" --epochs 2 --steps-per-epoch 2 --checkpoint-dir "$ck" >/dev/null \
  2>"$tmp/f.err" || rc=$?
if [[ $rc -eq 0 && -f $ck/ckpt-1000.kt.bad && ! -e $ck/ckpt-1000.kt ]] &&
   grep -q "ckpt-1000.kt: written for model .*; skipped for the previous one" "$tmp/f.err" &&
   grep -q "resuming from .*ckpt-2.kt" "$tmp/f.err"; then
  tap_ok "another model's newer checkpoint: skipped at the restart, moved aside at the next save"
else
  tap_fail "another model's newer checkpoint at a restart" \
    "rc=$rc dir: $(ls_ck "$ck"); $(tail -3 "$tmp/f.err")"
fi

# --- a forged checkpoint whose crc holds, newer than the run's -----------------------------
# Data position 2^62 in an intact file: the pipeline walked there one pass at a time,
# forever, at 100 % CPU, deaf to SIGTERM (hence timeout's SIGKILL). Its fields are
# checked now: corrupt like any other.
ck=$tmp/ck-forged
"$BIN" "${run[@]}" --epochs 1 --steps-per-epoch 2 --checkpoint-dir "$ck" >/dev/null 2>&1
python3 - "$ck/ckpt-2.kt" "$ck/ckpt-1000.kt" <<'PY'
import struct, sys, zlib
b = bytearray(open(sys.argv[1], "rb").read())
struct.pack_into("<Q", b, 280 + 8 * 6, 1 << 62)  # data position (docs/design.md, the file)
struct.pack_into("<I", b, len(b) - 4, zlib.crc32(bytes(b[:-4])))
open(sys.argv[2], "wb").write(b)
PY
rc=0
timeout -k 5 60 "$BIN" "${run[@]}" --epochs 2 --steps-per-epoch 2 --checkpoint-dir "$ck" \
  >/dev/null 2>"$tmp/p.err" || rc=$?
if [[ $rc -eq 0 && -f $ck/ckpt-1000.kt.bad && ! -e $ck/ckpt-1000.kt ]] &&
   grep -q "ckpt-1000.kt: data position 4611686018427387904 outside a pass over the 60000 \
training examples; skipped for the previous one" "$tmp/p.err" &&
   grep -q "resuming from .*ckpt-2.kt" "$tmp/p.err"; then
  tap_ok "a CRC-valid checkpoint at data position 2^62: skipped, moved aside, run finishes"
else
  tap_fail "a forged data position" "rc=$rc dir: $(ls_ck "$ck"); $(tail -3 "$tmp/p.err")"
fi

# --- the checkpoint volume fills up --------------------------------------------------------
small=$tmp/small
mkdir -p "$small"
if [[ $(id -u) -ne 0 ]]; then
  tap_skip "a full checkpoint volume" "mounting a tmpfs needs root"
  tap_done; exit
fi
# 1000 KiB: room for two checkpoints (100 pages each), not three
mount -t tmpfs -o size=1000k tmpfs "$small"
mounted=$small
rc=0
"$BIN" "${run[@]}" --epochs 1 --steps-per-epoch 6 --checkpoint-dir "$small" \
  --checkpoint-every-steps 1 >/dev/null 2>"$tmp/full.err" || rc=$?
msg=$(tail -1 "$tmp/full.err")
if [[ $rc -eq 75 && $msg == *"ckpt-3.kt: disk full (No space left on device)"* &&
      $msg == *"older checkpoints are kept"* ]] && grep -qF '"error"' "$tmp/termination"; then
  tap_ok "a full volume: exit 75 (retried), 'disk full' naming the checkpoint"
else
  tap_fail "a full volume: exit 75 with 'disk full'" "rc=$rc: $msg"
fi
if [[ $(ls_ck "$small") == "ckpt-1.kt ckpt-2.kt " ]]; then
  tap_ok "the older checkpoints are kept and no temporary file is left"
else
  tap_fail "older checkpoints kept after ENOSPC" "dir: $(ls_ck "$small")"
fi
# the operator makes room; the retried run resumes where the last checkpoint was
mount -o remount,size=4m "$small"
rc=0
"$BIN" "${run[@]}" --epochs 1 --steps-per-epoch 6 --checkpoint-dir "$small" \
  --checkpoint-every-steps 1 >/dev/null 2>"$tmp/retry.err" || rc=$?
if [[ $rc -eq 0 ]] && grep -q "resuming from .*ckpt-2.kt" "$tmp/retry.err"; then
  tap_ok "with room again the retried run resumes from step 2 and finishes"
else
  tap_fail "retry after making room" "rc=$rc $(tail -3 "$tmp/retry.err")"
fi

# --- the metrics file's volume is full: storage trouble too, so retried --------------------
umount "$small"; mounted=
mount -t tmpfs -o size=64k tmpfs "$small"
mounted=$small
dd if=/dev/zero of="$small/filler" bs=4k status=none 2>/dev/null || true
rc=0
"$BIN" "${run[@]}" --epochs 1 --steps-per-epoch 3 --checkpoint-dir "$tmp/ck-m" \
  --metrics-file "$small/metrics.jsonl" >/dev/null 2>"$tmp/mfull.err" || rc=$?
msg=$(tail -1 "$tmp/mfull.err")
if [[ $rc -eq 75 && $msg == *"--metrics-file $small/metrics.jsonl"*"disk full"* ]]; then
  tap_ok "a full metrics volume: exit 75 (retried), 'disk full' naming --metrics-file"
else
  tap_fail "a full metrics volume: exit 75 with 'disk full'" "rc=$rc: $msg"
fi
tap_done
