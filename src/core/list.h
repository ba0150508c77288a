/* Intrusive circular doubly-linked list.
 * Threads: no locking; a list belongs to the thread that owns its container. */
#ifndef FY_CORE_LIST_H
#define FY_CORE_LIST_H

#include <stdbool.h>
#include <stddef.h>

typedef struct fy_list {
    struct fy_list *prev, *next;
} fy_list_t;

static inline void fy_list_init(fy_list_t *l)
{
    l->prev = l->next = l;
}
static inline bool fy_list_empty(const fy_list_t *l)
{
    return l->next == l;
}
static inline void fy_list_insert_tail(fy_list_t *head, fy_list_t *n)
{
    n->prev = head->prev;
    n->next = head;
    head->prev->next = n;
    head->prev = n;
}
static inline void fy_list_remove(fy_list_t *n)
{
    n->prev->next = n->next;
    n->next->prev = n->prev;
    n->prev = n->next = n;
}
#define fy_container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

#endif
