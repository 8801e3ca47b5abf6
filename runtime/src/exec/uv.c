/* uv.c - placeholder until written */
