/* A native lock stall for the stack readers' tests (tests/tests/stack_readers.rs):
 * thread `holder` takes the model lock in hold_the_model_lock() and sleeps
 * holding it; the main thread blocks in pthread_mutex_lock inside
 * wait_for_the_model_lock(). Prints "ready" once both are in place, exits
 * when stdin closes or after 30 s. Built with and without frame pointers.
 *
 * `lock_holder SECONDS` (the daemon's capture tests, tests/tests/stacks.rs):
 * prints "ready", waits for SIGUSR1 (so that a tracer can attach first),
 * then the holder holds the lock SECONDS while the main thread waits for
 * it; prints "done" and exits. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
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

static void *holder(void *arg) {
    (void)arg;
    hold_the_model_lock();
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

/* `lock_holder SECONDS`: one stall of that long, on SIGUSR1. */
static int stall_on_signal(double seconds) {
    sigset_t usr1;
    int sig;
    pthread_t h, w;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &usr1, NULL); /* before any thread starts */
    hold_steps = (int)(seconds * 10);
    hold_step.tv_sec = 0;
    hold_step.tv_nsec = 100000000;
    if (pthread_create(&w, NULL, stdin_watch, NULL) != 0) {
        perror("pthread_create");
        return 1;
    }
    printf("ready\n");
    fflush(stdout);
    sigwait(&usr1, &sig);
    if (pthread_create(&h, NULL, holder, NULL) != 0) {
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
        return stall_on_signal(atof(argv[1]));
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
