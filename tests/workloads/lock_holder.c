/* A native lock stall for the stack readers' tests (tests/tests/stack_readers.rs):
 * thread `holder` takes the model lock in hold_the_model_lock() and sleeps
 * holding it; the main thread blocks in pthread_mutex_lock inside
 * wait_for_the_model_lock(). Prints "ready" once both are in place, exits
 * when stdin closes or after 30 s. Built with and without frame pointers. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t model_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t state_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t state_changed = PTHREAD_COND_INITIALIZER;
static int holding;

__attribute__((noinline)) void hold_the_model_lock(void) {
    pthread_mutex_lock(&model_lock);
    pthread_mutex_lock(&state_lock);
    holding = 1;
    pthread_cond_signal(&state_changed);
    pthread_mutex_unlock(&state_lock);
    for (int i = 0; i < 30; i++) {
        struct timespec second = {1, 0};
        nanosleep(&second, NULL);
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

int main(void) {
    pthread_t h, w;
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
