/* Range logs (rangelog.c): the ranges a program thread tells hot pages of, kept in a log of the
   thread's own until someone needs them, so that a range given back by the thread that took it
   before that costs neither the shared lock nor the shared index. */
#ifndef CA_RANGELOG_H
#define CA_RANGELOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#pragma GCC visibility push(hidden)
typedef void (*ca_rlog_apply_t)(void* p, size_t bytes);

/* [p, p + bytes) added, noted in this thread's log.  False: the log is full, or there is none for
   this thread: the caller applies it itself (this thread's log first). */
bool _ca_rlog_add(void* p, size_t bytes);
/* The range at p given back: true when a log held it (struck out, nothing else to do); false:
   it was applied (the caller removes it). */
bool _ca_rlog_strike(void* p);
/* Every logged range applied, the logs emptied (the caller holds the lock `apply` needs); this
   thread's only. */
void _ca_rlog_drain(ca_rlog_apply_t apply);
void _ca_rlog_drain_mine(ca_rlog_apply_t apply);
/* This thread ends (its log drained first, by the caller): the log goes to the next thread. */
void _ca_rlog_thread_done(void);
/* fork: every log held across it; the child's are free again, but for its own thread's (after
   the caller drained the others' ranges, which the child keeps) */
void _ca_rlog_fork_prepare(void);
void _ca_rlog_fork_parent(void);
void _ca_rlog_unlock_all(void);          /* a fork child before its handlers (locks reset) */
void _ca_rlog_fork_child(void);
uint64_t _ca_rlog_struck(void);          /* ranges struck out before they were applied */
#pragma GCC visibility pop

#endif
