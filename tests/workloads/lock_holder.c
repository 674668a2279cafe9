/* A native lock stall for the stack readers' tests (tests/tests/stack_readers.rs):
 * thread `holder` takes the model lock in hold_the_model_lock() and sleeps
 * holding it; the main thread blocks in pthread_mutex_lock inside
 * wait_for_the_model_lock(). Prints "ready" once both are in place, exits
 * when stdin closes or after 30 s. Built with and without frame pointers.
 *
 * `lock_holder SECONDS [MODE [IDLE]]` (the daemon's capture tests,
 * tests/tests/stacks.rs): starts IDLE idle threads (half sleeping, half in
 * a condition wait), prints "ready", waits for SIGUSR1 (so that a tracer can
 * attach first), then the holder holds the lock SECONDS while the main
 * thread waits for it, doing what MODE says: `sleep` (nanosleep, the
 * default) in hold_sleeping(), `pipe` (blocked reading a pipe nobody writes
 * to until the time is up) in hold_reading(), `compute` (on the CPU) in
 * hold_computing(). The holder thread exits as soon as it unlocks; prints
 * "done" and exits. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t model_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t state_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t state_changed = PTHREAD_COND_INITIALIZER;
static int holding;
/* How long the holder holds the lock: steps of hold_step. */
static int hold_steps = 30;
static struct timespec hold_step = {1, 0};

__attribute__((noinline)) void hold_the_model_lock(void) {
    pthread_mutex_lock(&model_lock);
    pthread_mutex_lock(&state_lock);
    holding = 1;
    pthread_cond_signal(&state_changed);
    pthread_mutex_unlock(&state_lock);
    for (int i = 0; i < hold_steps; i++) {
        struct timespec step = hold_step;
        nanosleep(&step, NULL);
    }
    pthread_mutex_unlock(&model_lock);
}

/* The holder's modes (`lock_holder SECONDS MODE`): each takes the model
 * lock, does its work for `hold_seconds`, and unlocks. */
static double hold_seconds;
static int slow_pipe[2];

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void say_holding(void) {
    pthread_mutex_lock(&state_lock);
    holding = 1;
    pthread_cond_signal(&state_changed);
    pthread_mutex_unlock(&state_lock);
}

__attribute__((noinline)) void hold_sleeping(void) {
    pthread_mutex_lock(&model_lock);
    say_holding();
    struct timespec t = {(time_t)hold_seconds, (long)((hold_seconds - (time_t)hold_seconds) * 1e9)};
    nanosleep(&t, NULL); /* sleeps holding the lock */
    pthread_mutex_unlock(&model_lock);
}

__attribute__((noinline)) void hold_reading(void) {
    char byte;
    pthread_mutex_lock(&model_lock);
    say_holding();
    if (read(slow_pipe[0], &byte, 1) != 1) /* reads holding the lock */
        perror("read");
    pthread_mutex_unlock(&model_lock);
}

volatile unsigned long spun;

__attribute__((noinline)) void hold_computing(void) {
    pthread_mutex_lock(&model_lock);
    say_holding();
    double end = now() + hold_seconds;
    while (now() < end) {
        unsigned long x = spun;
        for (int i = 0; i < 1000000; i++) /* computes holding the lock */
            x = x * 6364136223846793005UL + 1442695040888963407UL;
        spun = x;
    }
    pthread_mutex_unlock(&model_lock);
}

/* Writes the byte hold_reading() waits for once the time is up. */
static void *slow_writer(void *arg) {
    (void)arg;
    struct timespec t = {(time_t)hold_seconds, (long)((hold_seconds - (time_t)hold_seconds) * 1e9)};
    nanosleep(&t, NULL);
    if (write(slow_pipe[1], "x", 1) != 1)
        perror("write");
    return NULL;
}

static pthread_mutex_t idle_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t never = PTHREAD_COND_INITIALIZER;

static void *idle(void *arg) {
    if (arg) {
        for (;;)
            sleep(1);
    }
    pthread_mutex_lock(&idle_lock);
    for (;;)
        pthread_cond_wait(&never, &idle_lock);
    return NULL;
}

static void (*hold)(void) = hold_the_model_lock;

static void *holder(void *arg) {
    (void)arg;
    hold();
    return NULL;
}

/* Exits when stdin closes (the test is gone). */
static void *stdin_watch(void *arg) {
    (void)arg;
    char buf[64];
    while (read(0, buf, sizeof buf) > 0) {
    }
    exit(0);
}

__attribute__((noinline)) int wait_for_the_model_lock(void) {
    int err = pthread_mutex_lock(&model_lock);
    pthread_mutex_unlock(&model_lock);
    return err;
}

/* Waits until the holder holds the model lock. */
static void wait_holding(void) {
    pthread_mutex_lock(&state_lock);
    while (!holding)
        pthread_cond_wait(&state_changed, &state_lock);
    pthread_mutex_unlock(&state_lock);
}

/* `lock_holder SECONDS [MODE [IDLE]]`: one stall of that long, on SIGUSR1. */
static int stall_on_signal(double seconds, const char *mode, int idle_threads) {
    sigset_t usr1;
    int sig;
    pthread_t h, w, t;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &usr1, NULL); /* before any thread starts */
    hold_steps = (int)(seconds * 10);
    hold_step.tv_sec = 0;
    hold_step.tv_nsec = 100000000;
    hold_seconds = seconds;
    if (strcmp(mode, "sleep") == 0) {
        hold = hold_sleeping;
    } else if (strcmp(mode, "pipe") == 0) {
        hold = hold_reading;
    } else if (strcmp(mode, "compute") == 0) {
        hold = hold_computing;
    } else if (strcmp(mode, "steps") != 0) {
        fprintf(stderr, "unknown mode %s: sleep, pipe, compute or steps\n", mode);
        return 2;
    }
    if (pipe(slow_pipe) != 0) {
        perror("pipe");
        return 1;
    }
    for (int i = 0; i < idle_threads; i++) {
        if (pthread_create(&t, NULL, idle, i % 2 ? "sleep" : NULL) != 0) {
            perror("pthread_create");
            return 1;
        }
    }
    if (pthread_create(&w, NULL, stdin_watch, NULL) != 0) {
        perror("pthread_create");
        return 1;
    }
    printf("ready\n");
    fflush(stdout);
    sigwait(&usr1, &sig);
    if (pthread_create(&h, NULL, holder, NULL) != 0 ||
        (hold == hold_reading && pthread_create(&t, NULL, slow_writer, NULL) != 0)) {
        perror("pthread_create");
        return 1;
    }
    wait_holding();
    int err = wait_for_the_model_lock();
    pthread_join(h, NULL);
    printf("done\n");
    fflush(stdout);
    return err;
}

int main(int argc, char **argv) {
    pthread_t h, w;
    if (argc > 1)
        return stall_on_signal(atof(argv[1]), argc > 2 ? argv[2] : "steps", argc > 3 ? atoi(argv[3]) : 0);
    if (pthread_create(&h, NULL, holder, NULL) != 0 || pthread_create(&w, NULL, stdin_watch, NULL) != 0) {
        perror("pthread_create");
        return 1;
    }
    pthread_mutex_lock(&state_lock);
    while (!holding)
        pthread_cond_wait(&state_changed, &state_lock);
    pthread_mutex_unlock(&state_lock);
    printf("ready\n");
    fflush(stdout);
    /* The main thread is in place as soon as it calls; the test waits for
     * it to block (wchan/syscall) before reading it. */
    int err = wait_for_the_model_lock();
    return err;
}
