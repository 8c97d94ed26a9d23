/* The host-backend agent, one code path for lease-agent-host and
 * lease-agent --backend host: the host registration backend (mlock), the
 * host executor (C reference kernels on CPU threads, polled doorbells), the
 * budget defaults capped by what may be locked, and the serve step. CUDA-free
 * (target ga_agent_host: ga_server + ga_host). */
#ifndef GPU_AGENT_HOST_H
#define GPU_AGENT_HOST_H

#include "gpu/server.h"

LT_EXTERN_C_BEGIN

/* Announces "HOST BACKEND (@how): no GPU is used ..." at notice, then
 * serves @cli (parsed, log set up, signals blocked) until a signal. Returns
 * the exit status: 0, or 1 after logging why it could not start. */
int ga_agent_host_serve(struct ga_server_cli *cli, const char *how);

LT_EXTERN_C_END

#endif /* GPU_AGENT_HOST_H */
