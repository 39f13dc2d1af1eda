/*
 * The pod sandbox's process: it holds the pod's namespaces and does nothing else.
 *
 * It sleeps until SIGINT or SIGTERM, then exits 0, and reaps every child it inherits (as PID 1 of
 * the pod's PID namespace, when the namespace is shared, orphans are re-parented to it): the
 * behaviour of upstream's build/pause/linux/pause.c, written here for this project.
 * `-v` prints the version and exits.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef PAUSE_VERSION
#define PAUSE_VERSION "1.0"
#endif

static volatile sig_atomic_t stop_signal;

static void on_stop(int signo) { stop_signal = signo; }

static void on_child(int signo) {
    int saved = errno;
    (void)signo;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
    errno = saved;
}

static int handle(int signo, void (*handler)(int), int flags) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = handler;
    action.sa_flags = flags;
    sigemptyset(&action.sa_mask);
    return sigaction(signo, &action, NULL);
}

int main(int argc, char **argv) {
    sigset_t blocked, waiting;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-v") == 0) {
            printf("k8scifar pause %s\n", PAUSE_VERSION);
            return 0;
        }
    }
    if (getpid() != 1) {
        fputs("pause: not PID 1; orphans of this namespace are reaped by another process\n", stderr);
    }
    /* Block the stop signals while checking the flag, and wait for them with sigsuspend, so a
       signal arriving between the check and the wait is not lost. */
    sigemptyset(&blocked);
    sigaddset(&blocked, SIGINT);
    sigaddset(&blocked, SIGTERM);
    if (sigprocmask(SIG_BLOCK, &blocked, &waiting) < 0) return 1;
    if (handle(SIGINT, on_stop, 0) < 0 || handle(SIGTERM, on_stop, 0) < 0) return 2;
    if (handle(SIGCHLD, on_child, SA_NOCLDSTOP | SA_RESTART) < 0) return 3;
    on_child(SIGCHLD); /* children that ended before the handler was set */
    sigdelset(&waiting, SIGINT);
    sigdelset(&waiting, SIGTERM);
    while (!stop_signal) sigsuspend(&waiting);
    fprintf(stderr, "pause: stopping on signal %d\n", (int)stop_signal);
    return 0;
}
