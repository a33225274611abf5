/* api/config.c - troupe.h's configuration entry points: forwards to core/config.h. */
#include "core/config.h"

TR_API int tr_config_create(tr_config **out) {
    return tr__config_create(out);
}

TR_API void tr_config_destroy(tr_config *cfg) {
    tr__config_destroy(cfg);
}

TR_API int tr_config_set(tr_config *cfg, const char *key, const char *value) {
    return tr__config_set(cfg, key, value);
}

TR_API void tr_actor_class_init(tr_actor_class *cls) {
    tr__actor_class_init(cls);
    if (cls) cls->struct_size = TR_STRUCT_SIZE(tr_actor_class);
}

TR_API int tr_config_add_class(tr_config *cfg, const tr_actor_class *cls) {
    return tr__config_add_class(cfg, cls);
}

TR_API int tr_config_add_function(tr_config *cfg, const char *name, tr_task_fn fn) {
    return tr__config_add_function(cfg, name, fn);
}
