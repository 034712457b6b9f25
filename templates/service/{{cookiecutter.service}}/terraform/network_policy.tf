resource "kubernetes_network_policy_v1" "app" {
  metadata {
    name      = var.service
    namespace = local.namespace
    labels    = local.labels
  }
  spec {
    pod_selector {
      match_labels = local.selector
    }
    policy_types = ["Ingress"]
    # Only Envoy's ports (REST, gRPC), only from the allowed namespaces. The kubelet's probes of the app
    # port come from the node and are not subject to NetworkPolicy.
    ingress {
      from {
        namespace_selector {
          match_expressions {
            key      = "kubernetes.io/metadata.name"
            operator = "In"
            values   = var.allowed_namespaces
          }
        }
      }
      ports {
        port     = "http"
        protocol = "TCP"
      }
      ports {
        port     = "grpc"
        protocol = "TCP"
      }
    }
  }
}
