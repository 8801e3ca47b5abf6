/* ratelimit.c - placeholder until written */
