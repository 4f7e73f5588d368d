"""Building a target: the pipeline (config, ModelConfig, repair loop, layouts, checks),
one layout's build on meta under fake groups (layout, parallel, meta), every construction
recorded (recorder), and vLLM's ModelConfig (modelconfig)."""
