/* Error codes: functions return 0 on success, a negative FY_E* or -errno on failure;
 * I/O-style calls return >0 progress, 0 would block, <0 error (CONVENTIONS.md habit 3).
 * Threads: constants only. */
#ifndef FY_CORE_ERRORS_H
#define FY_CORE_ERRORS_H

#define FY_EEOF (-10001)    /* the peer closed its sending side */
#define FY_ETLS (-10002)    /* TLS protocol error (details logged by the TLS layer) */
#define FY_ELIMIT (-10003)  /* a configured bound was exceeded */
#define FY_ECLOSED (-10004) /* operation on a closed object */

#endif
