"""``flash_attention_autograd``: the forward and backward kernels as one PyTorch operation.

A ``torch.autograd.Function`` whose forward is ``flash_attention`` (which
also returns the log-sum-exp, saved for later) and whose backward is
``flash_attention_backward``: with it, any PyTorch model, chapter 10's tiny
GPT among them, trains on the course's kernels. CPU tensors go through numpy
and Numba's simulator, so that a model's tests run anywhere. It is the one
module of the package that uses torch, and it imports torch only when first
called.
"""

from __future__ import annotations

from gpucourse.kernels.attention.arguments import _check_flag
from gpucourse.kernels.attention.backward import flash_attention_backward
from gpucourse.kernels.attention.flash import flash_attention


def _torch_function():
    import torch

    class FlashAttention(torch.autograd.Function):
        """softmax(scale q k^T) v whose forward and backward are the course's kernels.

        CUDA tensors run on the GPU; CPU tensors go through numpy (on Numba's
        simulator where there is no GPU: small sizes only), so that a model's
        tests run anywhere."""

        @staticmethod
        def forward(ctx, q, k, v, causal, scale):
            args = [_kernel_side(x) for x in (q, k, v)]
            out, lse = flash_attention(*args, causal=causal, scale=scale, return_lse=True)
            out, lse = _torch_side(out, q), _torch_side(lse, q)
            ctx.save_for_backward(q, k, v, out, lse)
            ctx.causal, ctx.scale = causal, scale
            return out

        @staticmethod
        def backward(ctx, dout):
            q, k, v, out, lse = ctx.saved_tensors
            args = [_kernel_side(x) for x in (q, k, v, out, lse, dout.contiguous())]
            # The default version for the inputs: FlashAttention-2's backward in
            # half precision (version 5) for bfloat16, and for float16 on a GPU
            # with tensor cores; for float32, version 6 (3xTF32 on the tensor
            # cores) at head dims 64 and 128 on such a GPU, DEFAULT_VERSION otherwise.
            grads = flash_attention_backward(*args, causal=ctx.causal, scale=ctx.scale)
            return (*(_torch_side(g, q) for g in grads), None, None)

    return FlashAttention


_FUNCTION = None


def _kernel_side(x):
    """A tensor as the kernels take it: itself on a GPU, a numpy array on the CPU."""
    x = x.detach()
    return x if x.is_cuda else x.contiguous().numpy()


def _torch_side(x, like):
    import torch

    return x if isinstance(x, torch.Tensor) else torch.from_numpy(x).to(like.device)


def flash_attention_autograd(q, k, v, *, causal=False, scale=None):
    """Attention that PyTorch can differentiate, on the course's kernels: the
    forward kernel saves its log-sum-exp, the backward kernels use it.

    q, k, v: float32 or float16 torch tensors, or bfloat16 CUDA tensors (all
    of one dtype) of shape
    (batch, heads, seq, head_dim) (k and v: key_seq rows), on a CUDA device
    (the GPU kernels) or on the CPU (through numpy; on Numba's simulator where
    there is no GPU). Returns the output; ``.backward()`` fills q.grad, k.grad
    and v.grad, in the inputs' dtype.
    """
    global _FUNCTION
    import torch

    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor):
            raise ValueError(f"{name} must be a torch tensor, got {type(x).__name__}")
        if x.dtype not in (torch.float32, torch.float16) and not (
                x.dtype == torch.bfloat16 and x.is_cuda):
            raise ValueError(f"{name} must be float32 or float16, or bfloat16 on a CUDA device "
                             f"(the backward's version 5), got {x.dtype} on {x.device}")
    if _FUNCTION is None:
        _FUNCTION = _torch_function()
    return _FUNCTION.apply(q, k, v, _check_flag("causal", causal), scale)
