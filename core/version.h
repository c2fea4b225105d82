#ifndef KV_VERSION_H
#define KV_VERSION_H
#define KVTRACE_VERSION "0.1.0"
#endif
