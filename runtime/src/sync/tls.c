/* SPDX-License-Identifier: MIT */
/* tls.c - the agent's connection over TLS, for a Redis that only speaks
 * TLS (redis-server --tls-port, every managed Redis). Debian 12's hiredis
 * (0.14) has no TLS, so hiredis keeps doing what it does well and the
 * bytes go through OpenSSL here: hiredis still formats commands into its
 * output buffer and parses replies with its reader (with the agent's
 * bounded reply objects), and this file moves the bytes between them and
 * an SSL session on the socket hiredis connected. No second process (a
 * stunnel beside every gateway), no thread, the same socket timeouts. The
 * peer is verified: against the CA file given (or the system's), and its
 * name or IP address against the host (or tls_server_name). A client
 * certificate is sent when one is given (Redis asks for one by default:
 * tls-auth-clients yes).
 */
#include <stdio.h>
#include <string.h>

#include <hiredis/sds.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "sync_int.h"

static void tls_error(char *out, size_t cap, const char *what) {
  unsigned long e = ERR_get_error();
  char buf[160];

  if (e != 0)
    ERR_error_string_n(e, buf, sizeof(buf));
  else
    snprintf(buf, sizeof(buf), "no answer in time, or the peer closed");
  snprintf(out, cap, "tls: %s: %s", what, buf);
  ERR_clear_error();
}

int nres__sync_tls_init(nres_sync_t *s, char *why, size_t cap) {
  const nres_sync_config_t *c = &s->cfg;
  SSL_CTX *ctx;

  ctx = SSL_CTX_new(TLS_client_method());
  if (ctx == NULL) {
    tls_error(why, cap, "context");
    return NRES_ENOMEM;
  }
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
  if (c->tls_ca_file != NULL
          ? SSL_CTX_load_verify_locations(ctx, c->tls_ca_file, NULL) != 1
          : SSL_CTX_set_default_verify_paths(ctx) != 1) {
    tls_error(why, cap, c->tls_ca_file != NULL ? c->tls_ca_file : "system CAs");
    SSL_CTX_free(ctx);
    return NRES_EINVAL;
  }
  if (c->tls_cert_file != NULL &&
      (SSL_CTX_use_certificate_chain_file(ctx, c->tls_cert_file) != 1 ||
       SSL_CTX_use_PrivateKey_file(ctx, c->tls_key_file != NULL
                                            ? c->tls_key_file
                                            : c->tls_cert_file,
                                   SSL_FILETYPE_PEM) != 1)) {
    tls_error(why, cap, c->tls_cert_file);
    SSL_CTX_free(ctx);
    return NRES_EINVAL;
  }
  s->tls_ctx = ctx;
  return 0;
}

void nres__sync_tls_free(nres_sync_t *s) {
  if (s->tls_ctx != NULL)
    SSL_CTX_free(s->tls_ctx);
  s->tls_ctx = NULL;
}

void nres__sync_tls_close(nres_sync_t *s) {
  if (s->tls != NULL)
    SSL_free(s->tls);   /* no close_notify: the socket goes next */
  s->tls = NULL;
}

int nres__sync_tls_start(nres_sync_t *s) {
  const char *name = s->cfg.tls_server_name != NULL ? s->cfg.tls_server_name
                                                    : s->cur_host;
  X509_VERIFY_PARAM *vp;
  char at[300], why[200];
  SSL *ssl;

  ssl = SSL_new(s->tls_ctx);
  if (ssl == NULL || SSL_set_fd(ssl, s->rc->fd) != 1) {
    if (ssl != NULL)
      SSL_free(ssl);
    return NRES_ENOMEM;
  }
  vp = SSL_get0_param(ssl);
  /* An IP address is checked as one (SAN IP); a name also goes in SNI. */
  if (X509_VERIFY_PARAM_set1_ip_asc(vp, name) != 1) {
    SSL_set_tlsext_host_name(ssl, name);
    SSL_set1_host(ssl, name);
  }
  if (SSL_connect(ssl) != 1) {
    tls_error(why, sizeof(why), "handshake");
    if (SSL_get_verify_result(ssl) != X509_V_OK)
      snprintf(why, sizeof(why), "tls: handshake: certificate refused (%s)",
               X509_verify_cert_error_string(SSL_get_verify_result(ssl)));
    nres__sync_say(s, "%s: %s", nres__sync_where(s, at, sizeof(at)), why);
    SSL_free(ssl);
    return NRES_EAGAIN;
  }
  s->tls = ssl;
  return 0;
}

/* A failed SSL_read or SSL_write: the context's error set as hiredis
 * would. */
static int tls_failed(redisContext *c) {
  char why[200];

  tls_error(why, sizeof(why), "read/write");
  c->err = REDIS_ERR_IO;
  snprintf(c->errstr, sizeof(c->errstr), "%.120s", why);
  return REDIS_ERR;
}

static int tls_flush(nres_sync_t *s) {
  redisContext *c = s->rc;
  int n;

  while (sdslen(c->obuf) > 0) {
    n = SSL_write(s->tls, c->obuf, (int) sdslen(c->obuf));
    if (n <= 0)
      return tls_failed(c);
    sdsrange(c->obuf, n, -1);
  }
  return REDIS_OK;
}

int nres__sync_flush(nres_sync_t *s) {
  int done = 0;

  if (s->tls != NULL)
    return tls_flush(s);
  while (!done)
    if (redisBufferWrite(s->rc, &done) != REDIS_OK)
      return REDIS_ERR;
  return REDIS_OK;
}

/* A reply over TLS: what hiredis's reader has, or the output buffer sent
 * and more read until the reader has one. */
static int tls_reply(nres_sync_t *s, redisReply **out) {
  redisContext *c = s->rc;
  char buf[16384];
  void *reply = NULL;
  int n;

  for (;;) {
    if (redisGetReplyFromReader(c, &reply) != REDIS_OK)
      return REDIS_ERR;
    if (reply != NULL) {
      *out = reply;
      return REDIS_OK;
    }
    if (tls_flush(s) != REDIS_OK)
      return REDIS_ERR;
    n = SSL_read(s->tls, buf, sizeof(buf));
    if (n <= 0)
      return tls_failed(c);
    if (redisReaderFeed(c->reader, buf, (size_t) n) != REDIS_OK)
      return REDIS_ERR;
  }
}

int nres__sync_get_reply(nres_sync_t *s, redisReply **out) {
  *out = NULL;
  if (s->tls != NULL)
    return tls_reply(s, out);
  return redisGetReply(s->rc, (void **) out);
}

redisReply *nres__sync_call(nres_sync_t *s, int argc, const char **argv) {
  redisReply *r;

  if (redisAppendCommandArgv(s->rc, argc, argv, NULL) != REDIS_OK ||
      nres__sync_get_reply(s, &r) != REDIS_OK)
    return NULL;
  return r;
}
