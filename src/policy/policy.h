/* Traffic policies (issue 15, 16): the filters of the chain (http/filter.h) that operators
 * configure per listener and route: CIDR lists, JWT, rate limits, the WAF, transforms,
 * compression and the cache. Each filter kind is one file here (cidr.c, jwt.c, ...); this
 * header names the stages for logs and metrics.
 * Threads: stage names are constants; each filter's header says its own rules. */
#ifndef FY_POLICY_POLICY_H
#define FY_POLICY_POLICY_H

/* "access", "auth", ... for a stage of enum fy_filter_stage; "other" for anything else. */
const char *fy_policy_stage_name(int stage);

#endif
