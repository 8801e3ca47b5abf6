-- SPDX-License-Identifier: MIT
-- nres.cdef.dns: the ffi.cdef of runtime/include/nres/dns.h (the query
-- for a peer's name and the reading of its reply), for nres.ngx.resolve.
-- Loading checks nres_dns_answer_t's size against what the library reports.
local ffi = require "ffi"
local cdef = require "nres.cdef"

ffi.cdef [[
typedef struct nres_dns_answer_s {
  int rcode; uint32_t ttl, n, dropped; uint8_t addr[32][16];
} nres_dns_answer_t;
int nres_dns_query(uint8_t *buf, size_t cap, uint16_t id, const char *name, size_t len,
                   int qtype);
int nres_dns_reply(const uint8_t *msg, size_t len, const uint8_t *q, size_t qlen,
                   nres_dns_answer_t *out, const char **why);
uint16_t nres_dns_id(void);
int nres_dns_open(const char *server, int port, const char **why);
int nres_dns_send(int fd, const uint8_t *q, size_t qlen, const char **why);
int nres_dns_recv(int fd, const uint8_t *q, size_t qlen, nres_dns_answer_t *out,
                  const char **why);
void nres_dns_close(int fd);
int nres_dns_exchange(const char *server, int port, const uint8_t *q, size_t qlen,
                      int timeout_ms, nres_dns_answer_t *out, const char **why);
size_t nres_dns_answer_size(void);
size_t strnlen(const char *s, size_t maxlen);
]]

local theirs = tonumber(cdef.C.nres_dns_answer_size())
if theirs ~= ffi.sizeof("nres_dns_answer_t") then
  error("nres.cdef.dns: nres_dns_answer_t is " .. theirs .. " bytes in libnres, "
        .. ffi.sizeof("nres_dns_answer_t") .. " here: a libnres of another version", 2)
end

return true
