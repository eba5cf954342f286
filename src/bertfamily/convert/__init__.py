"""Conversions of a model into another form: ONNX export and ONNX Runtime execution (`onnx`),
RoBERTa → Longformer (`longformer`)."""
