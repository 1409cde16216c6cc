/* The floor: the least any wrapper can cost. A static program that only execs the command. */
#include <unistd.h>
int main(void) {
    char *argv[] = {"/bin/sh", "-c", "true", 0};
    execv(argv[0], argv);
    return 127;
}
