/* comm_check.h: `pagoda comm-check`, a comm plugin's conformance test
 * (comm_check.c). Not for: the core's use of collectives (comm.h). */
#ifndef PAGODA_COMM_CHECK_H
#define PAGODA_COMM_CHECK_H
int pagoda_cmd_comm_check(int argc, char **argv);
#endif
