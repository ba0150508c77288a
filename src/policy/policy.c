#include "policy/policy.h"

#include "http/filter.h"

const char *fy_policy_stage_name(int stage)
{
    switch (stage) {
    case FY_STAGE_CAPTURE:
        return "capture";
    case FY_STAGE_PROTOCOL:
        return "protocol";
    case FY_STAGE_TRACE:
        return "trace";
    case FY_STAGE_ACCESS:
        return "access";
    case FY_STAGE_AUTH:
        return "auth";
    case FY_STAGE_LIMIT:
        return "limit";
    case FY_STAGE_WAF:
        return "waf";
    case FY_STAGE_COMPRESS:
        return "compress";
    case FY_STAGE_REWRITE:
        return "rewrite";
    case FY_STAGE_CACHE:
        return "cache";
    }
    return "other";
}
