resource "kubernetes_namespace_v1" "team" {
  count = var.create_namespace ? 1 : 0
  metadata {
    name = var.namespace
    labels = {
      "app.kubernetes.io/part-of" = var.namespace
      # Pods must run unprivileged, as non-root, with a seccomp profile.
      "pod-security.kubernetes.io/enforce" = "restricted"
    }
  }
}

locals {
  namespace = var.create_namespace ? kubernetes_namespace_v1.team[0].metadata[0].name : var.namespace
  selector  = { "app.kubernetes.io/name" = var.service }
  labels = merge(local.selector, {
    "app.kubernetes.io/part-of"    = var.namespace
    "app.kubernetes.io/managed-by" = "terraform"
  })
}
