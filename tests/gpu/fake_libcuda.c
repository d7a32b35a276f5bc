/* A fake of the CUDA driver's checkpoint API, built by the tests into libcuda.so.1.
 *
 * It follows the documented state machine of cuCheckpointProcess*: RUNNING -(lock)->
 * LOCKED -(checkpoint)-> CHECKPOINTED -(restore)-> LOCKED -(unlock)-> RUNNING; a call from
 * any other state fails with CUDA_ERROR_ILLEGAL_STATE, a lock that times out leaves the
 * process RUNNING and fails with CUDA_ERROR_TIMEOUT, and nothing works before cuInit
 * (CUDA_ERROR_NOT_INITIALIZED).
 *
 * Processes live in a text file (FAKE_CUDA_STATE), one per line:
 *     pid state device_bytes host_bytes flags
 * so separate processes (the command line, the helper, the test) share them. Flags:
 * 1 = uses managed memory (lock is refused: CUDA_ERROR_NOT_SUPPORTED), 2 = a kernel that
 * never ends (lock times out: CUDA_ERROR_TIMEOUT). Checkpoint moves device_bytes to
 * host_bytes (the GPU is freed); restore moves them back. A pid not in the file is not a
 * CUDA process: CUDA_ERROR_INVALID_VALUE. FAKE_CUDA_VERSION sets cuDriverGetVersion's answer.
 * Built with -DNO_CHECKPOINT_API it lacks the checkpoint symbols (a driver older than 550).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_ILLEGAL_STATE = 401,
    CUDA_ERROR_NOT_SUPPORTED = 801,
    CUDA_ERROR_TIMEOUT = 909,
    CUDA_ERROR_UNKNOWN = 999,
};
enum { RUNNING = 0, LOCKED = 1, CHECKPOINTED = 2, FAILED = 3 };

#define MAXP 64
struct proc { int pid, state; unsigned long long dev, host; int flags; };
static struct proc procs[MAXP];
static int nprocs;
static int initialised;

static const char *path(void) {
    const char *p = getenv("FAKE_CUDA_STATE");
    return p ? p : "/nonexistent/fake-cuda-state";
}

static void load(void) {
    FILE *f = fopen(path(), "r");
    nprocs = 0;
    if (!f) return;
    while (nprocs < MAXP && fscanf(f, "%d %d %llu %llu %d", &procs[nprocs].pid,
                                   &procs[nprocs].state, &procs[nprocs].dev,
                                   &procs[nprocs].host, &procs[nprocs].flags) == 5)
        nprocs++;
    fclose(f);
}

static void save(void) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path());
    FILE *f = fopen(tmp, "w");
    if (!f) return;
    for (int i = 0; i < nprocs; i++)
        fprintf(f, "%d %d %llu %llu %d\n", procs[i].pid, procs[i].state, procs[i].dev,
                procs[i].host, procs[i].flags);
    fclose(f);
    rename(tmp, path());
}

static struct proc *find(int pid) {
    load();
    for (int i = 0; i < nprocs; i++)
        if (procs[i].pid == pid) return &procs[i];
    return NULL;
}

CUresult cuInit(unsigned int flags) {
    if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
    initialised = 1;
    return CUDA_SUCCESS;
}

CUresult cuDriverGetVersion(int *version) {
    const char *v = getenv("FAKE_CUDA_VERSION");
    if (!version) return CUDA_ERROR_INVALID_VALUE;
    *version = v ? atoi(v) : 12080;
    return CUDA_SUCCESS;
}

CUresult cuGetErrorName(CUresult error, const char **name) {
    switch (error) {
    case CUDA_SUCCESS: *name = "CUDA_SUCCESS"; break;
    case CUDA_ERROR_INVALID_VALUE: *name = "CUDA_ERROR_INVALID_VALUE"; break;
    case CUDA_ERROR_NOT_INITIALIZED: *name = "CUDA_ERROR_NOT_INITIALIZED"; break;
    case CUDA_ERROR_ILLEGAL_STATE: *name = "CUDA_ERROR_ILLEGAL_STATE"; break;
    case CUDA_ERROR_NOT_SUPPORTED: *name = "CUDA_ERROR_NOT_SUPPORTED"; break;
    case CUDA_ERROR_TIMEOUT: *name = "CUDA_ERROR_TIMEOUT"; break;
    default: *name = NULL; return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

#ifndef NO_CHECKPOINT_API
typedef struct { unsigned int timeoutMs; unsigned int reserved0; unsigned long long reserved1[7]; } LockArgs;

static CUresult transition(int pid, int from, int to, struct proc **out) {
    if (!initialised) return CUDA_ERROR_NOT_INITIALIZED;
    struct proc *p = find(pid);
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    if (p->state != from) return CUDA_ERROR_ILLEGAL_STATE;
    p->state = to;
    *out = p;
    return CUDA_SUCCESS;
}

CUresult cuCheckpointProcessGetState(int pid, int *state) {
    if (!initialised) return CUDA_ERROR_NOT_INITIALIZED;
    if (!state) return CUDA_ERROR_INVALID_VALUE;
    struct proc *p = find(pid);
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    *state = p->state;
    return CUDA_SUCCESS;
}

CUresult cuCheckpointProcessGetRestoreThreadId(int pid, int *tid) {
    if (!initialised) return CUDA_ERROR_NOT_INITIALIZED;
    if (!tid) return CUDA_ERROR_INVALID_VALUE;
    if (!find(pid)) return CUDA_ERROR_INVALID_VALUE;
    *tid = pid;
    return CUDA_SUCCESS;
}

CUresult cuCheckpointProcessLock(int pid, LockArgs *args) {
    if (!initialised) return CUDA_ERROR_NOT_INITIALIZED;
    struct proc *p = find(pid);
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    if (args && (args->reserved0 != 0)) return CUDA_ERROR_INVALID_VALUE;
    if (p->state != RUNNING) return CUDA_ERROR_ILLEGAL_STATE;
    if (p->flags & 1) return CUDA_ERROR_NOT_SUPPORTED;
    if (p->flags & 2) return CUDA_ERROR_TIMEOUT; /* left RUNNING, as documented */
    p->state = LOCKED;
    save();
    return CUDA_SUCCESS;
}

CUresult cuCheckpointProcessCheckpoint(int pid, void *args) {
    struct proc *p;
    (void)args;
    CUresult r = transition(pid, LOCKED, CHECKPOINTED, &p);
    if (r) return r;
    p->host += p->dev;
    p->dev = 0;
    save();
    return CUDA_SUCCESS;
}

CUresult cuCheckpointProcessRestore(int pid, void *args) {
    struct proc *p;
    (void)args;
    CUresult r = transition(pid, CHECKPOINTED, LOCKED, &p);
    if (r) return r;
    p->dev += p->host;
    p->host = 0;
    save();
    return CUDA_SUCCESS;
}

CUresult cuCheckpointProcessUnlock(int pid, void *args) {
    struct proc *p;
    (void)args;
    CUresult r = transition(pid, LOCKED, RUNNING, &p);
    if (r) return r;
    save();
    return CUDA_SUCCESS;
}
#endif
