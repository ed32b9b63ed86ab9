"""The model room: ComfyUI's model as training sees it — families and their defaults, the
objective from its model_sampling, its inputs and forward, loading, the text encoders, and the
autograd guards its code needs."""
