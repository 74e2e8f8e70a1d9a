#!/usr/bin/env bash
# The wave-2 ops, each against eager and its library baselines. compile is left out: its
# first call compiles every case, which takes minutes for these ops; add it with
# benchmarks/bench_ops.sh OUT SECONDS --baselines eager,compile OP.
#   benchmarks/bench_wave2.sh OUT
set -u
out=$1
b=benchmarks/bench_ops.sh
bash $b "$out/a" 60 --quick --baselines eager,sdpa_flash GroupedQueryAttentionDenseFwdOp
bash $b "$out/b" 60 --quick --baselines eager,sdpa_loop,flash_attn GroupedQueryAttentionVarlenFwdOp
bash $b "$out/c" 90 --quick --baselines eager GemmW4A16FwdOp BmmFwdOp MaxPool2dFwdOp AvgPool2dFwdOp
bash $b "$out/d" 60 --quick --baselines eager,grouped_mm GroupedGemmFwdOp MoeExpertMLPFwdOp
bash $b "$out/e" 60 --quick --baselines eager,deep_gemm MoeGroupedGemmFwdOp
