/* pergpu — several ranks in one worker, one per GPU (the TrainingJob's gpusPerWorker),
 * for make GPU=1 builds. NCCL refuses two ranks on one device, so a worker pod with G
 * GPUs runs G trainer processes: this process becomes their supervisor.
 *
 * TF_CONFIG names W workers (pods); the ranks are W*G: worker w's rank l (0 <= l < G) is
 * global rank w*G + l, listening on the worker's port + l, and trains on device l (rank
 * modulo the G devices the pod sees). Each rank is this program re-executed with the
 * expanded TF_CONFIG, --index w*G+l and --gpus-per-worker 1; ranks other than 0 write no
 * termination message. The supervisor forwards SIGTERM/SIGINT, stops the other ranks
 * when one fails (SIGKILL 60 s after SIGTERM), and exits with local rank 0's code, or
 * with the first failing rank's when rank 0 succeeded. */
#ifndef KT_PERGPU_H
#define KT_PERGPU_H

/* Runs the G = gpus_per_worker ranks of this worker with the trainer options argv[0..argc)
 * (the ones after `train`) and returns the exit code; exits 2 when TF_CONFIG is missing
 * or a port would pass 65535. */
int pergpu_main(int gpus_per_worker, int index_override, int argc, char **argv);

#endif
