/* The pod sandbox's process, for the node's pause image (tests/cluster/build.sh compiles it
 * static, node.sh packs it as an image): it holds the pod's namespaces open by doing nothing
 * until SIGINT or SIGTERM, and, as PID 1 of a pod that shares its PID namespace, reaps the
 * zombies its containers' orphans leave. */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void leave(int sig) { _exit(128 + sig); }

static void reap(int sig) {
    (void)sig;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

int main(void) {
    struct sigaction stop = {.sa_handler = leave}, child = {.sa_handler = reap};
    sigemptyset(&stop.sa_mask);
    sigemptyset(&child.sa_mask);
    child.sa_flags = SA_NOCLDSTOP | SA_RESTART;
    if (sigaction(SIGINT, &stop, NULL) || sigaction(SIGTERM, &stop, NULL) ||
        sigaction(SIGCHLD, &child, NULL))
        return 1;
    for (;;)
        pause();
}
