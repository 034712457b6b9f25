resource "kubernetes_horizontal_pod_autoscaler_v2" "app" {
  metadata {
    name      = var.service
    namespace = local.namespace
    labels    = local.labels
  }
  spec {
    min_replicas = var.min_replicas
    max_replicas = var.max_replicas
    scale_target_ref {
      api_version = "apps/v1"
      kind        = "Deployment"
      name        = kubernetes_deployment_v1.app.metadata[0].name
    }
    metric {
      type = "Resource"
      resource {
        name = "cpu"
        target {
          type                = "Utilization"
          average_utilization = var.target_cpu_utilization
        }
      }
    }
    behavior {
      # Scale down slowly: loading models makes new pods expensive.
      scale_down {
        stabilization_window_seconds = 300
        select_policy                = "Max"
        policy {
          type           = "Pods"
          value          = 1
          period_seconds = 60
        }
      }
    }
  }
}

resource "kubernetes_pod_disruption_budget_v1" "app" {
  metadata {
    name      = var.service
    namespace = local.namespace
    labels    = local.labels
  }
  spec {
    # One pod at a time during node drains; min_available would block drains at 1 replica.
    max_unavailable = "1"
    selector {
      match_labels = local.selector
    }
  }
}
