"""The CRDs in crds/, written from the models: the models are their only hand-written form.

    openapi      a model's structural OpenAPI v3 schema, as a CRD version's `openAPIV3Schema` holds it (pure)
    kinds        the three CRDs as declarations (names, scope, printer columns), assembled into whole CRDs

Nothing at run time imports this package; `hack/reference.py` (make reference, make lint) and the tests do. It
lives here rather than in hack/ so the generator is type-checked and imported like the models it reads.
"""
