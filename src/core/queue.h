/* Intrusive doubly linked queues: one definition of push/remove for every list in the core
   (a heap's span queues and purge list use span.next/prev; a heap's segment queues use
   segment.next/prev, its list of all segments segment.all_next/all_prev). */
#ifndef CA_QUEUE_H
#define CA_QUEUE_H

#define CA_QUEUE_OPS(name, queue_t, elem_t, next, prev)                                        \
  static inline void name##_push_front(queue_t* q, elem_t* e) {                               \
    e->prev = NULL; e->next = q->first;                                                        \
    if (q->first) q->first->prev = e; else q->last = e;                                        \
    q->first = e;                                                                              \
  }                                                                                            \
  static inline void name##_push_back(queue_t* q, elem_t* e) {                                \
    e->next = NULL; e->prev = q->last;                                                         \
    if (q->last) q->last->next = e; else q->first = e;                                         \
    q->last = e;                                                                               \
  }                                                                                            \
  static inline void name##_remove(queue_t* q, elem_t* e) {                                   \
    if (e->prev) e->prev->next = e->next; else q->first = e->next;                             \
    if (e->next) e->next->prev = e->prev; else q->last = e->prev;                              \
    e->next = e->prev = NULL;                                                                  \
  }

#include "types.h"
CA_QUEUE_OPS(spanq, ca_span_queue_t, ca_span_t, next, prev)
CA_QUEUE_OPS(segq, ca_segment_queue_t, ca_segment_t, next, prev)
CA_QUEUE_OPS(allq, ca_segment_queue_t, ca_segment_t, all_next, all_prev)

#endif
