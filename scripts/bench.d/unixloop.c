/* Per-call cost of the unix-socket gate (issue 10): run bare and inside shofer-sandbox, the
 * difference is what the gate adds.
 *   unixloop connect N   socket()+connect()+close() to an own listening socket in /tmp
 *                        (accepted and closed by the same process), N times
 *   unixloop send N      send() on a connected socket pair (never trapped)
 *   unixloop sendmsg N   sendmsg() with an address on a UDP socket to 127.0.0.1
 * Prints the mean microseconds per iteration. */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void die(const char *what) {
    perror(what);
    exit(1);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: unixloop connect|send|sendmsg N\n");
        return 2;
    }
    long n = atol(argv[2]);
    double t0, t1;
    if (!strcmp(argv[1], "connect")) {
        char dir[] = "/tmp/shofer-unixloop-XXXXXX";
        if (!mkdtemp(dir)) die("mkdtemp");
        struct sockaddr_un a = {.sun_family = AF_UNIX};
        snprintf(a.sun_path, sizeof a.sun_path, "%s/s", dir);
        int l = socket(AF_UNIX, SOCK_STREAM, 0);
        if (bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 128)) die("bind");
        t0 = now();
        for (long i = 0; i < n; i++) {
            int c = socket(AF_UNIX, SOCK_STREAM, 0);
            if (connect(c, (struct sockaddr *)&a, sizeof a)) die("connect");
            int s = accept(l, NULL, NULL);
            close(s);
            close(c);
        }
        t1 = now();
        unlink(a.sun_path);
        rmdir(dir);
    } else if (!strcmp(argv[1], "send")) {
        int sv[2];
        char b[64] = {0};
        if (socketpair(AF_UNIX, SOCK_DGRAM, 0, sv)) die("socketpair");
        t0 = now();
        for (long i = 0; i < n; i++) {
            if (send(sv[0], b, sizeof b, 0) < 0) die("send");
            if (recv(sv[1], b, sizeof b, 0) < 0) die("recv");
        }
        t1 = now();
    } else if (!strcmp(argv[1], "sendmsg")) {
        int r = socket(AF_INET, SOCK_DGRAM, 0), w = socket(AF_INET, SOCK_DGRAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t len = sizeof a;
        if (bind(r, (struct sockaddr *)&a, sizeof a) || getsockname(r, (struct sockaddr *)&a, &len))
            die("bind");
        char b[64] = {0};
        struct iovec v = {b, sizeof b};
        struct msghdr m = {.msg_name = &a, .msg_namelen = sizeof a, .msg_iov = &v, .msg_iovlen = 1};
        t0 = now();
        for (long i = 0; i < n; i++) {
            if (sendmsg(w, &m, 0) < 0) die("sendmsg");
            if (recv(r, b, sizeof b, 0) < 0) die("recv");
        }
        t1 = now();
    } else {
        return 2;
    }
    printf("%.3f\n", (t1 - t0) / n * 1e6);
    return 0;
}
