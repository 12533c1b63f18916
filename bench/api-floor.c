/* The least any module can spend on an exclusive acquire of a free key through the
 * Redis module API, to compare LOCK.ACQUIRE and SET NX PX with (bench/callgrind-floor.sh).
 * FLOOR.ACQUIRE key owner ttl does only the calls LOCK.ACQUIRE cannot do without:
 * open the key, find it empty, store a value of a module type, set its absolute
 * expiry, propagate the effect (`FLOOR.APPLY key owner token PXAT at`, the word a
 * kept string), send a keyspace event, signal the key, reply with an integer token.
 * No queue, no configs, no checks beyond the ttl: not a lock, a measuring stick. */
#define REDISMODULE_EXPERIMENTAL_API
#include <string.h>

#include "redismodule.h"

static RedisModuleType *Type;
static RedisModuleString *Pxat;
static long long NextToken = 1000000000000000LL;

struct value {
    long long token;
    unsigned char len;
    char owner[39];
};

static void *value_load(RedisModuleIO *io, int encver) {
    (void)io;
    (void)encver;
    return NULL;
}

static void value_save(RedisModuleIO *io, void *value) {
    (void)io;
    (void)value;
}

static void value_free(void *value) { RedisModule_Free(value); }

/* The decimal digits of n >= 0 into buf, two at a time as Redis's ull2string does;
 * returns their count. */
static size_t digits(long long n, char *buf) {
    static const char pairs[] =
        "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
        "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
        "8081828384858687888990919293949596979899";
    char tmp[24];
    size_t at = sizeof tmp;
    unsigned long long v = (unsigned long long)n;
    while (v >= 100) {
        size_t i = (size_t)(v % 100) * 2;
        v /= 100;
        tmp[--at] = pairs[i + 1];
        tmp[--at] = pairs[i];
    }
    if (v >= 10) {
        size_t i = (size_t)v * 2;
        tmp[--at] = pairs[i + 1];
        tmp[--at] = pairs[i];
    } else {
        tmp[--at] = (char)('0' + v);
    }
    memcpy(buf, tmp + at, sizeof tmp - at);
    return sizeof tmp - at;
}

static int acquire(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 4) return RedisModule_WrongArity(ctx);
    long long ttl;
    if (RedisModule_StringToLongLong(argv[3], &ttl) != REDISMODULE_OK || ttl <= 0)
        return RedisModule_ReplyWithError(ctx, "ERR invalid ttl");
    size_t len;
    const char *owner = RedisModule_StringPtrLen(argv[2], &len);
    RedisModuleKey *key = RedisModule_OpenKey(ctx, argv[1], REDISMODULE_READ | REDISMODULE_WRITE);
    if (RedisModule_KeyType(key) != REDISMODULE_KEYTYPE_EMPTY) {
        RedisModule_CloseKey(key);
        return RedisModule_ReplyWithNull(ctx);
    }
    long long at = RedisModule_Milliseconds() + ttl, token = NextToken++;
    struct value *v = RedisModule_Alloc(sizeof *v);
    v->token = token;
    v->len = (unsigned char)(len < sizeof v->owner ? len : sizeof v->owner);
    memcpy(v->owner, owner, v->len);
    if (RedisModule_ModuleTypeSetValue(key, Type, v) != REDISMODULE_OK ||
        RedisModule_SetAbsExpire(key, at) != REDISMODULE_OK) {
        RedisModule_CloseKey(key);
        return RedisModule_ReplyWithError(ctx, "ERR could not store");
    }
    char t[24], a[24];
    size_t tl = digits(token, t), al = digits(at, a);
    RedisModule_Replicate(ctx, "FLOOR.APPLY", "ssbsb", argv[1], argv[2], t, tl, Pxat, a, al);
    RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_MODULE, "floor.acquire", argv[1]);
    RedisModule_SignalModifiedKey(ctx, argv[1]);
    RedisModule_CloseKey(key);
    return RedisModule_ReplyWithLongLong(ctx, token);
}

/* Only there for RM_Replicate to find by name. */
static int apply(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    (void)argv;
    (void)argc;
    return RedisModule_ReplyWithSimpleString(ctx, "OK");
}

/* FLOOR.CALL key value: what a module command costs that only runs `SET key value`
 * through RedisModule_Call as LOCK.GUARD runs its command (as the caller from a
 * script, its reply passed on as it is), with no lock to check: the floor of a
 * guarded SET (bench/callgrind-guard.sh). */
static int call_set(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc != 3) return RedisModule_WrongArity(ctx);
    RedisModuleCallReply *reply = RedisModule_Call(ctx, "SET", "ss!0CSME", argv[1], argv[2]);
    if (reply == NULL) return RedisModule_ReplyWithError(ctx, "ERR no reply");
    RedisModule_ReplyWithCallReply(ctx, reply);
    RedisModule_FreeCallReply(reply);
    return REDISMODULE_OK;
}

int RedisModule_OnLoad(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    (void)argv;
    (void)argc;
    if (RedisModule_Init(ctx, "floor", 1, REDISMODULE_APIVER_1) == REDISMODULE_ERR)
        return REDISMODULE_ERR;
    RedisModule_SetModuleOptions(ctx, REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED);
    RedisModuleTypeMethods methods = {
        .version = REDISMODULE_TYPE_METHOD_VERSION,
        .rdb_load = value_load,
        .rdb_save = value_save,
        .free = value_free,
    };
    Type = RedisModule_CreateDataType(ctx, "floor-typ", 0, &methods);
    Pxat = RedisModule_CreateString(NULL, "PXAT", 4);
    if (Type == NULL || Pxat == NULL ||
        RedisModule_CreateCommand(ctx, "floor.acquire", acquire, "write deny-oom", 1, 1, 1) ==
            REDISMODULE_ERR ||
        RedisModule_CreateCommand(ctx, "floor.apply", apply, "write", 1, 1, 1) == REDISMODULE_ERR ||
        RedisModule_CreateCommand(ctx, "floor.call", call_set, "may-replicate", 1, 1, 1) ==
            REDISMODULE_ERR)
        return REDISMODULE_ERR;
    return REDISMODULE_OK;
}
